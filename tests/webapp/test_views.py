from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from webapp.campaigns.models import Campaign
from webapp.campaigns.services import campaign_create
from webapp.campaigns.views import CAMPAIGNS_PER_PAGE
from webapp.workers.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db


def heartbeat(hostname, queues, seconds_ago=0, stopped=False):
    seen = timezone.now() - timedelta(seconds=seconds_ago)
    return WorkerHeartbeat.objects.create(
        hostname=hostname,
        queues=queues,
        started=seen - timedelta(minutes=5),
        last_seen=seen,
        stopped=seen if stopped else None,
    )


@pytest.mark.parametrize("url", ["/", "/workers/", "/accounts/login/"])
def test_public_pages_answer_200(client, url):
    assert client.get(url).status_code == 200


def test_the_dashboard_lists_campaigns(client, queued_campaign):
    page = client.get("/").content.decode()
    assert "llama mlp" in page
    assert reverse("campaign-detail", args=[queued_campaign.id]) in page


def test_the_dashboard_paginates_campaigns(client, alice):
    for i in range(CAMPAIGNS_PER_PAGE + 5):
        Campaign.objects.create(owner=alice, name=f"campaign-{i:03d}")
    first = client.get("/")
    assert len(first.context["page"].object_list) == CAMPAIGNS_PER_PAGE
    assert "campaign-024" in first.content.decode()  # newest first
    second = client.get("/?page=2")
    assert len(second.context["page"].object_list) == 5
    assert "campaign-000" in second.content.decode()
    assert client.get("/?page=junk").status_code == 200


def test_launching_requires_login(client):
    response = client.get("/campaigns/new/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/campaigns/new/")
    assert client.post("/campaigns/new/", {"name": "x"}).status_code == 302
    assert not Campaign.objects.exists()


def test_the_launch_form_shows_for_a_logged_in_user(alice_client):
    response = alice_client.get("/campaigns/new/")
    assert response.status_code == 200
    assert 'name="shapes"' in response.content.decode()


def test_launching_creates_a_queued_campaign_and_shows_it(alice_client, alice):
    heartbeat("gpu0@h200", ["gpu.sm90"])
    response = alice_client.post(
        "/campaigns/new/",
        {
            "name": "attention",
            "shapes": "4096x4096x4096\n128x4096x4096\n4096x4096x4096",
            "layout": "tn",
            "budget_per_shape": "64",
            "proposer_mix": "rl=3, evolve=1",
            "reward_protocol": "device",
        },
    )
    campaign = Campaign.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("campaign-detail", args=[campaign.id])
    assert (campaign.owner, campaign.status, campaign.layout) == (alice, "queued", "tn")
    assert campaign.problems.count() == 2
    assert (campaign.budget_per_shape, campaign.reward_protocol) == (64, "device")
    assert campaign.proposer_mix == {"rl": 0.75, "evolve": 0.25}
    page = alice_client.get(response["Location"]).content.decode()
    assert "Waiting for the campaign runner" in page
    assert "Launched 2 shapes, 1 duplicates merged; estimated GPU time 85 s." in page
    assert "128x4096x4096" in page


def test_launching_with_bad_shapes_shows_each_error_and_creates_nothing(alice_client):
    response = alice_client.post(
        "/campaigns/new/", {"name": "bad", "shapes": "4096.0\n8x9x8\n64x64x64", "layout": "nn"}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "line 1: cannot read shape &#x27;4096.0&#x27;" in page
    assert "line 2: N=9 must be a multiple of 8" in page
    assert not Campaign.objects.exists()


def test_an_unknown_campaign_is_404(client):
    assert client.get("/campaigns/999/").status_code == 404


def test_the_campaign_page_lists_its_problems(client, queued_campaign):
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "4096x11008x4096" in page
    assert "16x4096x4096" in page


def test_the_dashboard_shows_connected_workers_and_that_gpu_steps_wait(client):
    heartbeat("main@cpu-box", ["compile", "default"])
    heartbeat("old@cpu-box", ["default"], seconds_ago=3600)
    page = client.get("/").content.decode()
    assert "main@cpu-box" in page
    assert "old@cpu-box" not in page
    assert "GPU steps (verification, timing) wait for a GPU worker" in page


def test_the_dashboard_does_not_say_gpu_steps_wait_when_a_gpu_worker_is_connected(client):
    heartbeat("gpu0@h200", ["gpu.sm90"])
    page = client.get("/").content.decode()
    assert "gpu0@h200" in page
    assert "wait for a GPU worker" not in page


def test_the_dashboard_says_when_no_worker_is_connected(client):
    assert "No Celery worker is connected" in client.get("/").content.decode()


def test_the_workers_page_separates_connected_from_stopped_workers(client):
    heartbeat("main@cpu-box", ["default"])
    heartbeat("gone@cpu-box", ["default"], stopped=True)
    response = client.get("/workers/")
    assert [w.hostname for w in response.context["online"]] == ["main@cpu-box"]
    assert [w.hostname for w in response.context["offline"]] == ["gone@cpu-box"]
    assert "stopped" in response.content.decode()


def test_logging_in_and_out_works(client, alice):
    response = client.post("/accounts/login/", {"username": "alice", "password": "wonderland-42"})
    assert response.status_code == 302
    assert "alice" in client.get("/").content.decode()
    client.post("/accounts/logout/")
    assert client.get("/campaigns/new/").status_code == 302


def test_the_admin_site_lists_every_model(admin_client, queued_campaign):
    for path in [
        "/admin/campaigns/campaign/",
        "/admin/campaigns/problem/",
        "/admin/campaigns/candidate/",
        "/admin/campaigns/baselineresult/",
        "/admin/workers/gpuenvironment/",
        "/admin/workers/workerheartbeat/",
    ]:
        assert admin_client.get(path).status_code == 200, path
        assert admin_client.get(path + "add/").status_code == 200, path


def test_campaign_create_merges_duplicate_problems(alice):
    from engine.problem import Problem

    campaign = campaign_create(
        owner=alice, name="dup", layout="nn", problems=[Problem(64, 64, 64), Problem(64, 64, 64)]
    )
    assert campaign.problems.count() == 1


def test_a_worker_whose_gpu_failed_its_health_probe_is_shown_with_the_reason(client):
    failed = heartbeat("gpu0@h200", ["default"])
    failed.gpu_failed = timezone.now()
    failed.gpu_failure = "nvidia-smi: Unable to determine the device handle (Xid 79)"
    failed.save()
    heartbeat("old-gpu@h200", ["default"], stopped=True)
    for page in (client.get("/").content.decode(), client.get("/workers/").content.decode()):
        assert "GPU failed a health probe" in page
        assert "Xid 79" in page
        assert "wait for a GPU worker" in page  # its queue stopped: no GPU worker is left
    assert client.get("/workers/").content.decode().count("GPU failed a health probe") == 1
