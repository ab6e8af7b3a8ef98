"""engine.campaign: the loop's rounds, rewards, budgets, stops, pipelining and resumption, on
recorded H200 measurements (ReplayExecutor) or stub executors; no GPU, no nvcc."""

from __future__ import annotations

import math
import random
import zlib
from pathlib import Path

import pytest

from engine.campaign.loop import Campaign, CampaignSettings
from engine.campaign.storage import SqliteStorage
from engine.compilation.compile import CompileResult
from engine.execution.executor import Outcome, ReplayExecutor, ReplayTable
from engine.execution.reward import reward_of
from engine.outcomes import CandidateRecord
from engine.problem import Problem
from engine.propose.mix import make_proposers
from engine.propose.policy import Policy
from engine.propose.proposers import EvolveProposer, RandomProposer, split_batch
from engine.propose.space import SearchSpace

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
BIG = Problem.parse("4096x4096x4096", "tn")


@pytest.fixture(scope="module")
def table() -> ReplayTable:
    return ReplayTable.load([RUN1])


def space_from(table: ReplayTable):
    return lambda problem: SearchSpace.from_configs(problem, table.configs_for(problem))


def campaign(table, storage, *, executor=None, mix=None, policy=None, **settings) -> Campaign:
    mix = mix or {"random": 1.0}
    settings.setdefault("budget", 12)
    settings.setdefault("batch_size", 4)
    return Campaign(
        [BIG],
        settings=CampaignSettings(mix=mix, **settings),
        executor=executor or ReplayExecutor(table),
        storage=storage,
        proposers=make_proposers(mix, policy=policy),
        space_for=space_from(table),
        policy=policy,
    )


def fake_compile(ok: bool = True, timed_out: bool = False) -> CompileResult:
    return CompileResult(
        ok=ok,
        library=Path("/tmp/fake.so") if ok else None,
        source_hash="x",
        archs=("sm_90a",),
        command="nvcc",
        log="",
        seconds=1.0,
        cached=False,
        error=None if ok else "kernel.cu(1): error: boom",
        timed_out=timed_out,
    )


class StubGpu:
    """Needs libraries (so the loop compiles and pipelines); every candidate takes 1 ms."""

    needs_libraries = True
    arch = "sm_90"

    def __init__(self, before_execute=None):
        self.batches: list[list[str]] = []
        self.before_execute = before_execute

    def execute(self, problem, batch):
        if self.before_execute:
            self.before_execute(len(self.batches))
        self.batches.append([c.name for c in batch])
        return [
            Outcome(c.name, "ok", seconds=1e-3, baselines={"cublaslt_autotune": 0.9e-3})
            for c in batch
        ]


def test_a_replayed_campaign_stops_at_its_budget_and_stores_every_candidate(table):
    storage = SqliteStorage(":memory:")
    (result,) = campaign(table, storage, name="c").run()
    assert result.stopped == "budget"
    stored = storage.candidates("c", BIG.key)
    assert len(stored) == 12 == len({r.name for r in stored})
    assert all(r.status == "ok" and r.proposer == "random" for r in stored)
    assert storage.problem_status("c", BIG.key) == "budget"


def test_reward_is_the_log_of_baseline_time_over_candidate_time(table):
    storage = SqliteStorage(":memory:")
    (result,) = campaign(table, storage, name="c", budget=4).run()
    times = table.seconds[BIG.key]
    base = min(times["cublaslt_autotune_nn"], times["cublaslt_autotune_tn"])
    for record in result.records:
        assert record.reward == pytest.approx(math.log(base / times[record.name]))


def test_a_failure_gets_the_fixed_negative_reward_whatever_the_timing():
    failed = Outcome("k", "rejected", "wrong", "wrong values")
    assert reward_of(failed, "cublaslt_autotune", -2.0) == -2.0


def test_compile_failures_are_stored_with_their_reason_and_never_executed(table):
    storage = SqliteStorage(":memory:")
    gpu = StubGpu()
    c = campaign(table, storage, executor=gpu, name="c", budget=8, failure_reward=-3.0)

    def fails(name: str) -> bool:
        return zlib.crc32(name.encode()) % 2 == 1

    c.round.compiler = lambda configs: [fake_compile(ok=not fails(k.name)) for k in configs]
    (result,) = c.run()
    failures = [r for r in result.records if r.status == "compile_error"]
    assert failures
    assert len(failures) == sum(fails(r.name) for r in result.records)
    assert all(r.reward == -3.0 and r.reason == "nvcc" and "boom" in r.message for r in failures)
    executed = {name for batch in gpu.batches for name in batch}
    assert not executed & {r.name for r in failures}


def test_an_interrupted_campaign_resumes_without_executing_anything_twice(table, tmp_path):
    executor = ReplayExecutor(table)
    db = tmp_path / "campaign.sqlite"
    seen = []

    def interrupt_after_five(record: CandidateRecord) -> None:
        seen.append(record.name)
        if len(seen) == 5:
            raise KeyboardInterrupt

    first = campaign(table, SqliteStorage(db), executor=executor, name="c", budget=16)
    first.after_record = interrupt_after_five
    with pytest.raises(KeyboardInterrupt):
        first.run()
    assert 0 < len(executor.executed) < 16
    (result,) = campaign(table, SqliteStorage(db), executor=executor, name="c", budget=16).run()
    assert result.stopped == "budget"
    assert len(result.records) == 16 == len({r.name for r in result.records})
    assert set(executor.executed.values()) == {1}
    assert len(executor.executed) == 16


def test_a_finished_campaign_run_again_executes_nothing(table, tmp_path):
    executor = ReplayExecutor(table)
    db = tmp_path / "campaign.sqlite"
    campaign(table, SqliteStorage(db), executor=executor, name="c").run()
    before = dict(executor.executed)
    (result,) = campaign(table, SqliteStorage(db), executor=executor, name="c").run()
    assert executor.executed == before
    assert len(result.records) == 12


def test_patience_stops_a_campaign_that_no_longer_improves(table):
    (result,) = campaign(
        table, SqliteStorage(":memory:"), name="c", budget=24, batch_size=1, patience=2
    ).run()
    assert result.stopped == "no_improvement"
    assert len(result.records) < 24


def test_the_gpu_seconds_budget_stops_the_campaign(table):
    executor = ReplayExecutor(table, gpu_seconds_per_candidate=10.0)
    c = campaign(table, SqliteStorage(":memory:"), executor=executor, name="c", gpu_seconds=35)
    (result,) = c.run()
    assert result.stopped == "gpu_budget"
    assert len(result.records) == 4  # one batch of 4 (40 s) passes 35 s


def test_a_converged_policy_stops_the_campaign(table):
    policy = Policy(["sm90", "sm80"])
    (result,) = campaign(
        table,
        SqliteStorage(":memory:"),
        name="c",
        mix={"rl": 1.0},
        policy=policy,
        budget=24,
        min_entropy=1.01,  # uniform is 1.0: converged at once
    ).run()
    assert result.stopped == "converged"
    assert len(result.records) == 4


def test_the_search_space_exhausted_ends_the_problem(table):
    (result,) = campaign(table, SqliteStorage(":memory:"), name="c", budget=64).run()
    assert result.stopped == "exhausted"
    assert len(result.records) == len(table.configs_for(BIG)) == 24


def test_a_batch_is_shared_among_proposers_by_weight():
    assert split_batch(8, {"rl": 0.5, "evolve": 0.3, "random": 0.2}) == {
        "rl": 4,
        "evolve": 2,  # 2.4 → 2
        "random": 2,  # 1.6 → 2: the larger remainder gets the spare slot
    }
    assert sum(split_batch(5, {"a": 1, "b": 1, "c": 1}).values()) == 5


def test_evolve_children_differ_from_a_top_parent_in_one_or_two_knobs(table):
    problem = Problem.parse("8192x8192x8192", "tn")
    space = SearchSpace.full(problem, families=["sm80"])
    parent = space.configs[len(space) // 2]
    history = [CandidateRecord(parent.name, "sm80", parent.knobs(), "random", "ok", 0.5)]
    children = EvolveProposer().propose(
        problem, space, 6, history=history, exclude={parent.name}, rng=random.Random(0)
    )
    assert len(children) == 6
    for child in children:
        assert child.parent == parent.name
        assert child.config.is_valid(problem)
        assert 1 <= space.distances(parent.name)[space.by_name[child.config.name]] <= 2


def test_random_proposals_are_valid_and_untried(table):
    space = space_from(table)(BIG)
    tried = {c.name for c in space.configs[:20]}
    got = RandomProposer().propose(BIG, space, 10, history=[], exclude=tried, rng=random.Random(1))
    assert len(got) == 4
    assert not {p.config.name for p in got} & tried


def test_storage_refuses_to_store_a_candidate_twice():
    import sqlite3

    storage = SqliteStorage(":memory:")
    storage.open_campaign("c", {})
    storage.add_problem("c", BIG)
    record = CandidateRecord("k", "sm90", {"tile_m": 128}, "rl", "ok", 0.1, timings={"a": 1})
    storage.record("c", BIG.key, [record])
    assert storage.candidates("c", BIG.key) == [record]
    with pytest.raises(sqlite3.IntegrityError):
        storage.record("c", BIG.key, [record])


def test_storage_lists_its_campaigns_in_the_order_they_were_opened():
    storage = SqliteStorage(":memory:")
    assert storage.campaign_names() == []
    storage.open_campaign("b", {})
    storage.open_campaign("a", {})
    storage.open_campaign("b", {"reopened": True})
    assert storage.campaign_names() == ["b", "a"]
