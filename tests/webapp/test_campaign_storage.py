"""The engine loop writes through DjangoStorage into the Campaign, Problem and Candidate rows."""

from __future__ import annotations

import pytest
from django.conf import settings

from engine.campaign.loop import Campaign as EngineCampaign
from engine.campaign.loop import CampaignSettings
from engine.execution.executor import ReplayExecutor, ReplayTable
from engine.outcomes import CandidateRecord
from engine.problem import Problem as EngineProblem
from engine.propose.mix import make_proposers
from engine.propose.space import SearchSpace
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.campaigns.services import campaign_create
from webapp.campaigns.storage import DjangoStorage, measured_winners

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
SHAPES = [EngineProblem.parse("4096x4096x4096", "tn"), EngineProblem.parse("1024x1024x1024", "tn")]


@pytest.fixture(scope="module")
def table() -> ReplayTable:
    return ReplayTable.load([settings.BASE_DIR / RECORDED_RUN])


@pytest.fixture
def campaign(alice) -> Campaign:
    return campaign_create(owner=alice, name="replayed", layout="tn", problems=SHAPES)


def run_loop(campaign: Campaign, table: ReplayTable, budget: int = 8) -> EngineCampaign:
    mix = {"evolve": 0.5, "random": 0.5}
    loop = EngineCampaign(
        SHAPES,
        settings=CampaignSettings(name=campaign.name, budget=budget, batch_size=4, mix=mix),
        executor=ReplayExecutor(table),
        storage=DjangoStorage(campaign),
        proposers=make_proposers(mix),
        space_for=lambda p: SearchSpace.from_configs(p, table.configs_for(p)),
    )
    loop.run()
    return loop


def test_the_engine_loop_writes_candidates_and_statuses_to_the_database(campaign, table):
    run_loop(campaign, table)
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.RUNNING
    for problem in Problem.objects.filter(campaign=campaign):
        assert (problem.status, problem.stopped) == (Problem.Status.DONE, "budget")
        rows = Candidate.objects.filter(problem=problem)
        assert rows.count() == 8
        assert all(r.outcome and r.source and len(r.source_hash) == 64 for r in rows)
        assert problem.best_speedups["cublaslt_autotune"] > 0
        done = rows.filter(status=Candidate.Status.DONE)
        assert done.exists()
        assert all(r.timings["device"]["median_s"] > 0 for r in done)


def test_a_resumed_loop_runs_nothing_twice(campaign, table):
    run_loop(campaign, table, budget=4)
    again = run_loop(campaign, table, budget=8)
    assert set(again.executor.executed.values()) == {1}
    assert again.executed == 8  # 4 more per shape
    assert Candidate.objects.filter(problem__campaign=campaign).count() == 16


def test_storage_reads_back_what_it_recorded(campaign, table):
    storage = DjangoStorage(campaign)
    key = SHAPES[0].key
    config = table.configs_for(SHAPES[0])[0]
    record = CandidateRecord(
        name=config.name, family=config.FAMILY, knobs=config.knobs(), proposer="random",
        status="rejected", reward=-2.0, reason="spot_check", message="wrong values", round=3,
    )  # fmt: skip
    storage.record(campaign.name, key, [record])
    assert storage.candidates(campaign.name, key) == [record]
    assert storage.problem_status(campaign.name, key) == "pending"
    storage.set_problem_status(campaign.name, key, "exhausted")
    assert storage.problem_status(campaign.name, key) == "exhausted"
    with pytest.raises(ValueError, match="already recorded"):
        storage.record(campaign.name, key, [record])
    with pytest.raises(ValueError, match="holds campaign"):
        storage.candidates("another", key)


def test_a_transfer_proposer_starts_from_each_problems_best_measured_candidates(
    campaign, table, django_assert_num_queries
):
    from engine.propose.proposers import TRANSFER_TOP

    run_loop(campaign, table, budget=8)
    with django_assert_num_queries(1):  # each compile step asks: one query, no row's source
        known = measured_winners("sm_90", top=TRANSFER_TOP)
    by_problem: dict[str, list[float]] = {}
    for problem, record in known:
        assert record.status == "ok"
        by_problem.setdefault(problem.key, []).append(record.reward)
    assert set(by_problem) == {p.key for p in SHAPES}
    for problem in Problem.objects.filter(campaign=campaign):
        rewards = sorted(
            (c.reward for c in problem.candidates.filter(status=Candidate.Status.DONE)),
            reverse=True,
        )
        assert sorted(by_problem[problem.as_engine().key], reverse=True) == rewards[:TRANSFER_TOP]
    assert measured_winners("sm_80", top=TRANSFER_TOP) == []  # another GPU's results stay there
