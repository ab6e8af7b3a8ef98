"""engine.campaign.round: one round for both front-ends, and the shared policy file."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from engine.campaign.round import (
    Round,
    RoundSettings,
    batch_size_for,
    candidate_record,
    compile_failure,
)
from engine.compilation.compile import CompileResult
from engine.execution.executor import Outcome, ReplayExecutor, ReplayTable
from engine.problem import Problem
from engine.propose.mix import make_proposers
from engine.propose.policy import Policy, PolicyFile
from engine.propose.proposers import Proposal
from engine.propose.space import SearchSpace

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
BIG = Problem.parse("4096x4096x4096", "tn")
FAMILIES = ("sm90", "sm80")


@pytest.fixture(scope="module")
def table() -> ReplayTable:
    return ReplayTable.load([RUN1])


@pytest.fixture(scope="module")
def space(table) -> SearchSpace:
    return SearchSpace.from_configs(BIG, table.configs_for(BIG))


def built(*, ok=True, timed_out=False, rejected_by="") -> CompileResult:
    result = CompileResult(
        ok=ok,
        library=Path("/tmp/x.so") if ok else None,
        source_hash="x",
        archs=("sm_90a",),
        command="nvcc",
        log="static gate: cudaStreamCreate",
        seconds=1.0,
        cached=False,
        error=None if ok else "error: boom",
        timed_out=timed_out,
    )
    if rejected_by:
        object.__setattr__(result, "rejected_by", rejected_by)
    return result


def test_a_budget_is_spent_in_several_rounds_of_at_most_the_cap():
    assert batch_size_for(64) == 8  # capped
    assert batch_size_for(16) == 4
    assert batch_size_for(10) == 3
    assert batch_size_for(2) == 1
    assert batch_size_for(64, cap=32) == 16


def test_build_failures_are_classified_in_one_place():
    assert compile_failure("k", built()) is None
    error = compile_failure("k", built(ok=False))
    assert (error.status, error.reason, error.message) == ("compile_error", "nvcc", "error: boom")
    timeout = compile_failure("k", built(ok=False, timed_out=True))
    assert (timeout.status, timeout.reason) == ("timeout", "nvcc_timeout")
    gated = compile_failure("k", built(ok=False, rejected_by="static_gate"))
    assert (gated.status, gated.reason) == ("rejected", "static_gate")


def test_a_record_carries_its_proposal_and_the_reward_of_its_outcome(space):
    config = space.configs[0]
    proposal = Proposal(config, "evolve", parent="p", meta={"why": "mutated"})
    ok = Outcome(config.name, "ok", seconds=1e-3, baselines={"cublaslt_autotune": 2e-3})
    record = candidate_record(
        proposal, ok, round_no=3, baseline="cublaslt_autotune", failure_reward=-2.0
    )
    assert (record.proposer, record.parent, record.round, record.meta) == (
        "evolve",
        "p",
        3,
        {"why": "mutated"},
    )
    assert record.reward == pytest.approx(0.693147, rel=1e-5)
    failed = candidate_record(
        proposal,
        Outcome(config.name, "rejected", "spot_check"),
        round_no=3,
        baseline="cublaslt_autotune",
        failure_reward=-2.0,
    )
    assert failed.reward == -2.0


def rounds(policy: Policy | None, *, seed: int) -> Round:
    mix = {"rl": 0.5, "evolve": 0.25, "random": 0.25}
    settings = RoundSettings(budget=16, batch_size=4, mix=mix, seed=seed)
    return Round(settings, make_proposers(mix, policy=policy))


def test_a_round_draws_from_its_seed_problem_and_number_only(space):
    policy = Policy(FAMILIES)
    first = rounds(policy, seed=5).propose(BIG, space, [], round_no=2, exclude=set())
    rounds(policy, seed=5).propose(BIG, space, [], round_no=0, exclude=set())  # state? none
    again = rounds(policy, seed=5).propose(BIG, space, [], round_no=2, exclude=set())
    other = rounds(policy, seed=6).propose(BIG, space, [], round_no=2, exclude=set())
    assert [p.config.name for p in first] == [p.config.name for p in again]
    assert [p.config.name for p in first] != [p.config.name for p in other]


def test_a_whole_round_records_and_learns_once(space, table):
    policy = Policy(FAMILIES)
    round_ = rounds(policy, seed=1)
    from engine.propose.policy import InMemoryLearner

    round_.learner = InMemoryLearner(policy)
    result = round_.run(
        BIG, space, [], ReplayExecutor(table), round_no=0, tried=set(), stream="c/big"
    )
    assert len(result.records) == 4
    assert [r.name for r in result.records] == [p.config.name for p in result.batch]
    assert policy.updates == 1
    assert policy.applied == {"c/big": 0}
    assert not round_.learn(BIG, space, result.records, stream="c/big", round_no=0)
    assert policy.updates == 1


def test_a_replay_executor_refuses_a_protocol_its_table_did_not_record(table):
    with pytest.raises(ValueError, match="device-protocol times only"):
        ReplayExecutor(table, protocol="offline")


def learn_rounds(path: str, stream: str, rounds_: int) -> None:
    table = ReplayTable.load([RUN1])
    space = SearchSpace.from_configs(BIG, table.configs_for(BIG))
    shared = PolicyFile(Path(path), FAMILIES)
    for step in range(rounds_):
        records = [_Reward(c.name, 0.1 * (i + step)) for i, c in enumerate(space.configs[:3])]
        shared.learn(BIG, space, records, stream=stream, step=step)


class _Reward:
    def __init__(self, name: str, reward: float) -> None:
        self.name, self.reward = name, reward


@pytest.mark.slow
def test_workers_sharing_a_policy_file_lose_none_of_each_others_updates(tmp_path):
    path = tmp_path / "policy" / "sm_90.pt"
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=learn_rounds, args=(str(path), f"campaign-{i}/big", 4))
        for i in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    saved = Policy.load(path, FAMILIES)
    assert saved is not None
    assert saved.updates == 12
    assert saved.applied == {f"campaign-{i}/big": 3 for i in range(3)}
    learn_rounds(str(path), "campaign-0/big", 4)  # a retried step learns nothing twice
    assert Policy.load(path, FAMILIES).updates == 12


def test_a_policy_file_starts_from_the_shipped_policy_when_none_is_saved(tmp_path):
    shipped = Policy(FAMILIES, seed=3)
    shipped.trained_on = ["a table"]
    shipped.save(tmp_path / "shipped.pt")
    shared = PolicyFile(tmp_path / "mine.pt", FAMILIES, start=tmp_path / "shipped.pt")
    assert (shared.origin, shared.policy.trained_on) == ("pretrained", ["a table"])
    assert PolicyFile(tmp_path / "mine.pt", FAMILIES).origin == "fresh"
    other_space = PolicyFile(tmp_path / "mine.pt", ("sm80",), start=tmp_path / "shipped.pt")
    assert other_space.origin == "fresh"  # trained on another space: ignored
    assert Policy(("sm80",)).space_id != shipped.space_id


def test_the_gpu_step_child_times_in_the_campaigns_protocol(table):
    from engine.execution import gpu_step

    config = table.configs_for(BIG)[0]
    batch = [{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}]
    (outcome,) = gpu_step.run_batch(f"replay:{RUN1}", BIG, batch, protocol="device")
    assert set(outcome["timings"]) == {"device"}
    with pytest.raises(ValueError, match="device-protocol times only"):
        gpu_step.run_batch(f"replay:{RUN1}", BIG, batch, protocol="graph")


def test_optimize_refuses_another_protocol_than_the_replay_tables(tmp_path, monkeypatch):
    from engine import cli

    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    args = ["optimize", "--shapes", "4096x4096x4096", "--replay", str(RUN1),
            "--protocol", "offline", "--db", str(tmp_path / "db.sqlite")]  # fmt: skip
    with pytest.raises(SystemExit, match="device-protocol times only"):
        cli.main(args)
