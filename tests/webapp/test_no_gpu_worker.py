"""A campaign nobody can time: the launch form says so first, the campaign says what it waits for
and what to run; a cancelled campaign's shapes read Cancelled at once."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine.problem import Problem as EngineProblem
from webapp.campaigns.models import Campaign, Problem
from webapp.campaigns.services import campaign_create
from webapp.workers.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db

LAUNCH = {
    "name": "no gpu",
    "shapes": "4096x4096x4096",
    "layout": "tn",
    "budget_per_shape": "8",
    "proposer_mix": "rl=1",
    "reward_protocol": "device",
}


def heartbeat(hostname: str, queues: list[str], seconds_ago: float = 0) -> WorkerHeartbeat:
    seen = timezone.now() - timedelta(seconds=seconds_ago)
    return WorkerHeartbeat.objects.create(
        hostname=hostname, queues=queues, started=seen - timedelta(minutes=5), last_seen=seen
    )


def offline_pools(page: str) -> dict[str, str]:
    start = page.index('<script id="offline-pools" type="application/json">') + 51
    return json.loads(page[start : page.index("</script>", start)])


def test_the_launch_form_names_the_pools_no_gpu_worker_serves(alice_client):
    heartbeat("cpu@h", ["compile"])
    heartbeat("gpu1@h", ["gpu.sm80"])
    page = alice_client.get("/campaigns/new/").content.decode()
    assert offline_pools(page) == {"": "gpu.sm90", "sm90": "gpu.sm90"}
    assert 'id="no-worker"' in page
    assert "Launch it although no GPU worker is online" in page


def test_a_launch_no_gpu_worker_can_run_needs_the_box_ticked(alice_client):
    response = alice_client.post("/campaigns/new/", LAUNCH)
    assert response.status_code == 200
    assert "No GPU worker of gpu.sm90 is online" in response.content.decode()
    assert not Campaign.objects.exists()
    confirmed = alice_client.post("/campaigns/new/", {**LAUNCH, "launch_without_worker": "on"})
    assert confirmed.status_code == 302
    assert Campaign.objects.count() == 1


def test_a_launch_needs_no_box_when_a_worker_serves_its_pool(alice_client):
    heartbeat("gpu1@h", ["gpu.sm80"])
    refused = alice_client.post("/campaigns/new/", LAUNCH)  # its shapes' arch: gpu.sm90
    assert "No GPU worker of gpu.sm90 is online" in refused.content.decode()
    assert alice_client.post("/campaigns/new/", {**LAUNCH, "gpu_pool": "sm80"}).status_code == 302


def test_a_worker_whose_gpu_failed_does_not_count_as_online(alice_client):
    heartbeat("gpu0@h", ["gpu.sm90"])
    WorkerHeartbeat.objects.update(gpu_failed=timezone.now())
    assert alice_client.post("/campaigns/new/", LAUNCH).status_code == 200


def test_a_campaign_no_worker_serves_says_it_waits_and_what_to_run(client, queued_campaign):
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.RUNNING)
    created = queued_campaign.created
    page = client.get(f"/campaigns/{queued_campaign.id}/").content.decode()
    assert ">Waiting for a GPU worker</span>" in page
    assert f"waiting for a GPU worker (none online since {created:%Y-%m-%d %H:%M} UTC)" in page
    assert "celery -A webapp worker -Q gpu.sm90 -n gpu0@%h" in page
    progress = client.get(f"/api/campaigns/{queued_campaign.id}/progress.json").json()
    assert progress["status"] == "running"
    assert progress["status_label"] == "Waiting for a GPU worker"
    assert progress["gpu_wait"]["queues"] == ["gpu.sm90"]
    assert "-Q gpu.sm90" in progress["gpu_wait"]["commands"][0]
    dashboard = client.get("/").content.decode()
    assert "status-waiting" in dashboard


def test_the_wait_says_when_a_worker_of_its_queue_was_last_online(client, queued_campaign):
    gone = heartbeat("gpu0@h", ["gpu.sm90"], seconds_ago=3 * 3600)
    page = client.get(f"/campaigns/{queued_campaign.id}/").content.decode()
    assert f"(none online since {gone.last_seen:%Y-%m-%d %H:%M} UTC)" in page


def test_the_wait_ends_once_a_worker_of_its_queue_is_online(client, queued_campaign):
    heartbeat("gpu0@h", ["gpu.sm90"])
    progress = client.get(f"/api/campaigns/{queued_campaign.id}/progress.json").json()
    assert progress["gpu_wait"] is None
    assert progress["status_label"] == "Queued"
    page = client.get(f"/campaigns/{queued_campaign.id}/").content.decode()
    assert 'id="gpu-wait" hidden' in page


def test_a_paused_campaign_does_not_wait_for_a_worker(client, queued_campaign):
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.PAUSED)
    progress = client.get(f"/api/campaigns/{queued_campaign.id}/progress.json").json()
    assert (progress["gpu_wait"], progress["status_label"]) == (None, "Paused")


def test_cancel_marks_the_unfinished_shapes_cancelled_at_once(alice_client, queued_campaign):
    first, second = queued_campaign.problems.order_by("id")
    Problem.objects.filter(id=first.id).update(status=Problem.Status.DONE)
    Problem.objects.filter(id=second.id).update(status=Problem.Status.RUNNING)
    response = alice_client.post(f"/campaigns/{queued_campaign.id}/cancel/")
    assert response.status_code == 302
    statuses = dict(queued_campaign.problems.values_list("id", "status"))
    assert statuses == {first.id: "done", second.id: "cancelled"}
    progress = alice_client.get(f"/api/campaigns/{queued_campaign.id}/progress.json").json()
    assert [p["status_label"] for p in progress["problems"]].count("Cancelled") == 1
    assert progress["gpu_wait"] is None


def running_campaign(owner, name: str, pool: str = "") -> Campaign:
    campaign = campaign_create(
        owner=owner,
        name=name,
        layout="tn",
        problems=[EngineProblem.parse("4096x4096x4096", "tn")],
        gpu_pool=pool,
    )
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    return campaign


def dashboard_queries(client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as captured:
        page = client.get("/").content.decode()
    return len(captured), page


def test_the_campaign_list_reads_the_heartbeats_once_whatever_the_number_of_campaigns(
    client, alice
):
    heartbeat("gpu0@h", ["gpu.sm90"], seconds_ago=3 * 3600)  # offline: the waits say since when
    heartbeat("gpu1@h", ["gpu.sm80"])
    running_campaign(alice, "first")
    one, page = dashboard_queries(client)
    assert page.count(">Waiting for a GPU worker</span>") == 1
    for i in range(5):
        running_campaign(alice, f"more {i}", pool="sm80" if i % 2 else "")
    six, page = dashboard_queries(client)
    assert page.count(">Waiting for a GPU worker</span>") == 4  # the two sm80 ones have one
    assert six == one
