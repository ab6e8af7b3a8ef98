"""What the user of a campaign felt, read from its work items: wall time, GPU busy, the first
verified kernel, the finals, candidates per wall-hour; on the campaign page and in its JSON."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from webapp.campaigns.models import Campaign, Problem, WorkItem
from webapp.campaigns.times import campaign_times

pytestmark = pytest.mark.django_db
START = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def step(problem: Problem, kind: str, round_no: int, start_s: float, end_s: float, **result):
    """A finished work item that ran from ``start_s`` to ``end_s`` seconds after START."""
    item = WorkItem.objects.create(
        campaign=problem.campaign,
        problem=problem,
        kind=kind,
        round=round_no,
        status=WorkItem.Status.DONE,
        queue="compile" if kind == WorkItem.Kind.COMPILE else "gpu.sm90",
        worker="gpu0@host" if kind != WorkItem.Kind.COMPILE else "cpu@host",
        result=result,
    )
    WorkItem.objects.filter(id=item.id).update(
        created=START + timedelta(seconds=start_s), updated=START + timedelta(seconds=end_s)
    )


def run_one_shape(campaign: Campaign) -> None:
    """Compile 0–30 s, a GPU step 30–60 s (4 measured, none verified), compile 60–70 s, a GPU
    step 70–100 s (4 measured, 2 verified), finals 100–160 s."""
    problem = campaign.problems.order_by("id").first()
    step(problem, WorkItem.Kind.COMPILE, 0, 0, 30, compiled=4)
    step(problem, WorkItem.Kind.GPU, 0, 30, 60, measured=4, ok=0, step_s=28.0)
    step(problem, WorkItem.Kind.COMPILE, 1, 60, 70, compiled=4)
    step(problem, WorkItem.Kind.GPU, 1, 70, 100, measured=4, ok=2, step_s=29.0)
    step(problem, WorkItem.Kind.FINAL, 1, 100, 160, sanitized=1, passed=1, step_s=59.0)


def test_a_finished_campaigns_times_run_from_its_first_step_to_its_last(queued_campaign):
    run_one_shape(queued_campaign)
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.DONE)
    queued_campaign.refresh_from_db()
    times = campaign_times(campaign=queued_campaign, now=START + timedelta(hours=5))
    assert times is not None
    assert times.wall_s == 160.0  # not to now: the campaign is done
    assert times.gpu_busy_s == 28.0 + 29.0 + 59.0
    assert times.gpu_busy_fraction == pytest.approx(116 / 160)
    assert times.first_verified_s == 100.0  # the end of the first step that verified a kernel
    assert times.finals_done_s == 160.0
    assert times.candidates == 8
    assert times.candidates_per_wall_hour == pytest.approx(8 / 160 * 3600)


def test_an_active_campaigns_wall_time_runs_to_now_and_it_has_no_finals_time_yet(
    queued_campaign,
):
    run_one_shape(queued_campaign)
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.RUNNING)
    queued_campaign.refresh_from_db()
    times = campaign_times(campaign=queued_campaign, now=START + timedelta(seconds=400))
    assert times is not None
    assert (times.wall_s, times.finals_done_s) == (400.0, None)


def test_steps_on_two_gpu_workers_count_against_both_gpus(queued_campaign):
    run_one_shape(queued_campaign)
    WorkItem.objects.filter(kind=WorkItem.Kind.FINAL).update(worker="gpu1@host")
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.DONE)
    queued_campaign.refresh_from_db()
    times = campaign_times(campaign=queued_campaign, now=START)
    assert times is not None
    assert times.gpu_workers == 2
    assert times.gpu_busy_fraction == pytest.approx(116 / (160 * 2))


def times_line(page: str) -> str:
    """The campaign page's times line as its reader sees it (tags out, spaces folded)."""
    fragment = page[page.index('id="times"') :].split(">", 1)[1].split("</p>")[0]
    return " ".join(re.sub(r"<[^>]+>", "", fragment).split())


def test_a_campaign_no_worker_ran_has_no_times(queued_campaign, client):
    assert campaign_times(campaign=queued_campaign, now=START) is None
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert '<p class="small" id="times" hidden>' in page  # until a first step has run
    document = client.get(reverse("campaign-results-json", args=[queued_campaign.id])).json()
    assert document["times"] is None
    progress = client.get(reverse("api-campaign-progress", args=[queued_campaign.id])).json()
    assert progress["times"] is None
    assert progress["times_display"] is None


def test_the_campaign_page_and_its_json_say_what_its_user_waited_for(queued_campaign, client):
    run_one_shape(queued_campaign)
    Campaign.objects.filter(id=queued_campaign.id).update(status=Campaign.Status.DONE)
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert times_line(page) == (
        "Time: 3 min of wall time since its first step · GPU busy 72% of it (2 min of GPU and "
        "finals steps) · first verified kernel after 2 min · finals done after 3 min · 8 "
        "candidates measured, 180 per wall-hour"
    )
    progress = client.get(reverse("api-campaign-progress", args=[queued_campaign.id])).json()
    assert progress["times_display"]["busy"] == "72%"
    assert progress["times"]["candidates"] == 8
    document = client.get(reverse("campaign-results-json", args=[queued_campaign.id])).json()
    assert document["times"]["gpu_busy_seconds"] == 116.0
    assert document["times"]["first_verified_seconds"] == 100.0
