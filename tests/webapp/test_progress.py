import pytest
from django.urls import reverse

from webapp.campaigns.models import Problem

pytestmark = pytest.mark.django_db


def test_the_progress_endpoint_counts_shapes_candidates_and_bests(client, recorded_campaign):
    data = client.get(reverse("api-campaign-progress", args=[recorded_campaign.id])).json()
    assert (data["status"], data["status_label"]) == ("done", "Done")
    assert (data["shapes"], data["shapes_done"], data["candidates"]) == (16, 16, 334)
    assert data["best_speedups"]["cublas"] == pytest.approx(0.946, abs=5e-4)
    first = data["problems"][0]
    assert set(first) == {"problem", "status", "status_label", "candidates", "best_speedups"}
    assert sum(p["candidates"] for p in data["problems"]) == 334


def test_the_progress_of_a_queued_campaign_follows_its_shapes(client, queued_campaign):
    url = reverse("api-campaign-progress", args=[queued_campaign.id])
    data = client.get(url).json()
    assert (data["status"], data["shapes"], data["shapes_done"], data["candidates"]) == (
        "queued",
        2,
        0,
        0,
    )
    assert data["best_speedups"] == dict.fromkeys(data["best_speedups"])
    Problem.objects.filter(campaign=queued_campaign, m=16).update(
        status=Problem.Status.DONE, best_speedups={"cublas": 1.02}
    )
    data = client.get(url).json()
    assert data["shapes_done"] == 1
    assert data["best_speedups"]["cublas"] == 1.02


def test_the_campaign_page_polls_the_progress_endpoint(client, queued_campaign):
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert f'data-src="/api/campaigns/{queued_campaign.id}/progress.json"' in page
    assert "js/progress.js" in page
    assert 'data-field="candidates"' in page


def test_an_unknown_campaign_has_no_progress(client, db):
    assert client.get("/api/campaigns/999/progress.json").status_code == 404
