"""With 10,000 candidates in one campaign every page and chart endpoint answers in under 100 ms
(the 1000-shape campaign, whose page lists every shape, in under 300 ms)."""

import io
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from webapp.campaigns.models import Campaign, Candidate, WorkItem
from webapp.campaigns.synthetic import SYNTHETIC_PREFIX

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

CANDIDATES = 10_000
BUDGET_S = 0.100
THOUSAND_SHAPES_BUDGET_S = 0.300
MAX_QUERIES = 12  # a fixed number per page, whatever the candidate count


def best_of(client, url, runs=3, clock=time.perf_counter):
    """Fastest of ``runs`` requests (the first one warms caches), with its query count."""
    times, queries = [], 0
    client.get(url)
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            start = clock()
            response = client.get(url)
            if response.streaming:
                b"".join(response.streaming_content)
            times.append(clock() - start)
        assert response.status_code == 200, url
        queries = len(captured)
    return min(times), queries


def test_every_page_answers_in_under_100_ms_with_10000_candidates(client, alice, capsys):
    call_command(
        "make_fixture_campaign", candidates=CANDIDATES, owner="alice", stdout=io.StringIO()
    )
    campaign = Campaign.objects.get(name__startswith=SYNTHETIC_PREFIX)
    assert Candidate.objects.filter(problem__campaign=campaign).count() == CANDIDATES
    problem = campaign.problems.order_by("id").first()
    candidate = problem.candidates.order_by("-reward").first()
    client.force_login(alice)
    pages = {
        "campaign list": "/",
        "campaign page": reverse("campaign-detail", args=[campaign.id]),
        "shape page": reverse("problem-detail", args=[problem.id]),
        "shape page, by time, page 5": reverse("problem-detail", args=[problem.id])
        + "?sort=time&page=5",
        "shape page, filtered by name": reverse("problem-detail", args=[problem.id])
        + "?sort=name&family=sm90&status=done&proposer=resampled",
        "candidate page": reverse("candidate-detail", args=[candidate.id]),
        "speedups.json": reverse("api-campaign-speedups", args=[campaign.id]),
        "heatmap.json": reverse("api-campaign-heatmap", args=[campaign.id]),
        "progress.json": reverse("api-campaign-progress", args=[campaign.id]),
        "shape history.json": reverse("api-problem-history", args=[problem.id]),
        "campaign history.json": reverse("api-campaign-history", args=[campaign.id]),
        "campaign knobs.json": reverse("api-campaign-knobs", args=[campaign.id]),
        "shape knobs.json": reverse("api-problem-knobs", args=[problem.id]),
    }
    report, slow = [], []
    for label, url in pages.items():
        seconds, queries = best_of(client, url)
        report.append(f"{label:32s} {seconds * 1000:6.1f} ms {queries:3d} queries")
        if seconds >= BUDGET_S or queries > MAX_QUERIES:
            slow.append(label)
    for label, name in [
        ("results.csv", "campaign-results-csv"),
        ("results.json", "campaign-results-json"),
    ]:
        seconds, queries = best_of(client, reverse(name, args=[campaign.id]), runs=1)
        report.append(
            f"{label:32s} {seconds * 1000:6.1f} ms {queries:3d} queries (download, not a page)"
        )
    with capsys.disabled():
        print("\n" + "\n".join(report))
    assert not slow, "\n".join(report)


def add_work_items(campaign: Campaign, rounds: int = 5) -> int:
    """The steps workers would have left: per shape and round a compile and a GPU step, then a
    finals step (what the page's times line reads)."""
    items = []
    for problem in campaign.problems.all():
        for r in range(rounds):
            common = {"campaign": campaign, "problem": problem, "round": r, "status": "done"}
            compiled = {"compiled": 2}
            items.append(WorkItem(kind="compile", queue="compile", result=compiled, **common))
            items.append(
                WorkItem(
                    kind="gpu",
                    queue="gpu.sm90",
                    worker="gpu0",
                    result={"measured": 2, "ok": 1, "step_s": 1.5},
                    **common,
                )
            )
        items.append(
            WorkItem(
                campaign=campaign,
                problem=problem,
                kind="final",
                round=rounds,
                status="done",
                queue="gpu.sm90",
                worker="gpu0",
                result={"step_s": 30.0},
            )
        )
    WorkItem.objects.bulk_create(items, batch_size=2000)
    return len(items)


def test_a_1000_shape_campaign_answers_in_under_300_ms(client, alice, capsys):
    """The CUDA-L2 preset's 1000 shapes, 10 000 candidates, 11 000 work items: the campaign page
    lists every shape and what the campaign's user waited for."""
    call_command(
        "make_fixture_campaign", grid="cuda-l2", per_shape=10, owner="alice", stdout=io.StringIO()
    )
    campaign = Campaign.objects.get(name__contains="1000 shapes")
    assert Candidate.objects.filter(problem__campaign=campaign).count() == CANDIDATES
    assert add_work_items(campaign) == 11_000
    pages = {
        "campaign list": "/",
        "campaign page": reverse("campaign-detail", args=[campaign.id]),
        "speedups.json": reverse("api-campaign-speedups", args=[campaign.id]),
        "progress.json": reverse("api-campaign-progress", args=[campaign.id]),
        "heatmap.json": reverse("api-campaign-heatmap", args=[campaign.id]),
        "campaign history.json": reverse("api-campaign-history", args=[campaign.id]),
        "campaign knobs.json": reverse("api-campaign-knobs", args=[campaign.id]),
    }
    report, slow = [], []
    for label, url in pages.items():
        # the request runs in this thread (the test client, SQLite): the thread's CPU time is
        # what the page costs, whatever else the machine, or a thread an earlier test left in
        # this process, runs meanwhile (process_time counted one: 361 ms CPU in 227 ms of wall)
        seconds, queries = best_of(client, url, clock=time.thread_time)
        wall, _ = best_of(client, url, runs=1)
        report.append(
            f"{label:32s} {seconds * 1000:6.1f} ms CPU {wall * 1000:6.1f} ms wall"
            f" {queries:3d} queries"
        )
        if seconds >= THOUSAND_SHAPES_BUDGET_S or queries > MAX_QUERIES:
            slow.append(label)
    with capsys.disabled():
        print("\n" + "\n".join(report))
    assert not slow, "\n".join(report)
