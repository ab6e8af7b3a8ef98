"""The campaign loop: the rounds of engine.campaign.round, per problem, in one process.

For each problem, rounds run until a stop: the candidate budget, the campaign's GPU-seconds
budget, the space exhausted, no better candidate for ``patience`` rounds, or the policy converged
(its entropy over the untried configs below ``min_entropy``). When the executor needs compiled
libraries, the next batch is proposed and compiled in a background thread while the current one
runs on the GPU (so the policy's update lags by one batch; ``pipeline=False`` proposes each round
after the one before was learnt, as the web app's steps do); a replay executor needs only names
and runs unpipelined. Every outcome is stored before the next round, and names already stored
are never executed again: a stopped campaign resumes where it was.

What a round proposes, how its outcomes become records, their rewards and what the policy learns
are engine.campaign.round's: the web app's Celery steps run the same rounds. Reward =
log(best baseline time / candidate time) in the executor's protocol, baseline
``cublaslt_autotune`` (best of both layouts) by default; a failure (compile error, rejection,
timeout) gets ``failure_reward`` and its reason is stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.campaign.round import (
    DEFAULT_MIX,
    FAILURE_REWARD,
    Compiler,
    PolicyLearner,
    Round,
    RoundSettings,
    batch_size_for,
)
from engine.campaign.storage import CampaignStorage
from engine.compilation.compile import compile_configs
from engine.execution.executor import CompiledCandidate, GpuExecutor, Outcome
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.policy import Policy
from engine.propose.proposers import LearnsCublasLtKernels, Proposal, Proposer
from engine.propose.space import SearchSpace
from engine.timing.baseline_names import NVIDIA
from engine.timing.protocol_names import DEFAULT_PROTOCOL, PROTOCOLS

FINAL = ("budget", "exhausted", "no_improvement", "converged", "gpu_budget")

__all__ = ["DEFAULT_MIX", "FINAL", "Campaign", "CampaignSettings", "compile_configs"]


@dataclass(frozen=True)
class CampaignSettings:
    name: str = "campaign"
    budget: int = 64  # candidates per problem
    gpu_seconds: float | None = None  # for the whole campaign
    batch_size: int | None = None  # None: round.batch_size_for(budget), several rounds a shape
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    baseline: str = "cublaslt_autotune"
    failure_reward: float = FAILURE_REWARD
    patience: int | None = None  # rounds without a better candidate before stopping
    min_entropy: float | None = None  # stop when the policy's normalised entropy falls below
    seed: int = 0
    pipeline: bool = True
    protocol: str = DEFAULT_PROTOCOL  # the executor's timing protocol, which the reward uses

    def __post_init__(self) -> None:
        if self.baseline not in NVIDIA:  # the search's GPU steps time these, not TORCH_TUNED
            raise ValueError(f"unknown baseline {self.baseline!r}: expected one of {NVIDIA}")
        if self.budget < 1 or (self.batch_size is not None and self.batch_size < 1):
            raise ValueError("budget and batch size must be at least 1")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}: expected one of {PROTOCOLS}")

    @property
    def batch(self) -> int:
        return self.batch_size or batch_size_for(self.budget)

    def round_settings(self) -> RoundSettings:
        return RoundSettings(
            budget=self.budget,
            batch_size=self.batch,
            mix=self.mix,
            baseline=self.baseline,
            failure_reward=self.failure_reward,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mix"] = dict(self.mix)
        out["batch_size"] = self.batch
        return out


@dataclass
class ProblemResult:
    problem: Problem
    records: list[CandidateRecord]
    stopped: str
    executed: int = 0  # candidates executed in this run (not loaded from storage)

    def best(self, baseline: str) -> CandidateRecord | None:
        ok = [r for r in self.records if r.status == CandidateStatus.OK and baseline in r.baselines]
        return max(ok, key=lambda r: r.speedups()[baseline], default=None)

    def best_speedups(self, baseline: str) -> dict[str, float]:
        """The speedups over every baseline of one candidate, the best over ``baseline``: each
        baseline's own best could be a different kernel, a shape no one kernel reaches."""
        best = self.best(baseline)
        return best.speedups() if best is not None else {}

    def best_so_far(self, baseline: str) -> list[float]:
        """Best speedup over ``baseline`` after each candidate (0 before any success)."""
        out, best = [], 0.0
        for record in self.records:
            best = max(best, record.speedups().get(baseline, 0.0))
            out.append(best)
        return out


@dataclass(frozen=True)
class Progress:
    problem: Problem
    done: int  # candidates of this problem
    budget: int
    best: Mapping[str, float]  # the best candidate's speedup over each baseline
    failed: int
    campaign_done: int
    campaign_total: int
    elapsed: float
    eta: float | None  # seconds, from this run's pace


class Campaign:
    """``learner``: where the policy learns each round (engine.propose.policy.PolicyFile or
    InMemoryLearner; None: it does not learn online). ``policy``: the one the rl proposer
    samples, for the entropy stop."""

    def __init__(
        self,
        problems: Sequence[Problem],
        *,
        settings: CampaignSettings,
        executor: GpuExecutor,
        storage: CampaignStorage,
        proposers: Mapping[str, Proposer],
        space_for: Callable[[Problem], SearchSpace],
        policy: Policy | None = None,
        learner: PolicyLearner | None = None,
        compiler: Compiler | None = None,
        progress: Callable[[Progress], None] | None = None,
        after_record: Callable[[CandidateRecord], None] | None = None,
    ) -> None:
        self.problems = list(problems)
        self.settings = settings
        self.executor = executor
        self.storage = storage
        self.proposers = dict(proposers)
        self.space_for = space_for
        self.policy = policy
        self.round = Round(
            settings.round_settings(),
            proposers,
            learner=learner,
            compiler=compiler or compile_configs,
        )
        self.progress = progress
        self.after_record = after_record
        self.gpu_seconds = 0.0
        self.campaign_done = 0
        self.executed = 0
        self.started = time.monotonic()

    # -- the campaign ------------------------------------------------------------------------
    def run(self) -> list[ProblemResult]:
        s = self.settings
        self.storage.open_campaign(s.name, s.to_dict())
        for problem in self.problems:
            self.storage.add_problem(s.name, problem)
            stored = self.storage.candidates(s.name, problem.key)
            self.campaign_done += len(stored)
            self.gpu_seconds += sum(r.gpu_seconds for r in stored)
        self.started = time.monotonic()
        results = []
        for problem in self.problems:
            results.append(self.run_problem(problem))
        return results

    def stream(self, problem: Problem) -> str:
        return f"{self.settings.name}/{problem.key}"

    def run_problem(self, problem: Problem) -> ProblemResult:
        s = self.settings
        history = self.storage.candidates(s.name, problem.key)
        status = self.storage.problem_status(s.name, problem.key)
        if status in FINAL and not (status == "budget" and len(history) < s.budget):
            return ProblemResult(problem, history, status or "")
        self.storage.set_problem_status(s.name, problem.key, "running")
        space = self.space_for(problem)
        tried = {r.name for r in history}
        round_no = max((r.round for r in history), default=-1) + 1
        if history:  # resumed: what the proposers keep, and the last round learnt (once)
            self.round.observe(problem, space, history)
            last = [r for r in history if r.round == round_no - 1]
            stream = self.stream(problem)
            self.round.learn(problem, space, last, stream=stream, round_no=round_no - 1)
        best = max((r.reward for r in history if r.status == CandidateStatus.OK), default=-math.inf)
        stale = 0
        executed = 0
        pipelined = s.pipeline and self.executor.needs_libraries
        pool = ThreadPoolExecutor(1, thread_name_prefix="compile") if pipelined else None
        try:
            batch = self._propose(problem, space, history, tried, round_no, set())
            ready = self._submit(pool, batch)
            stopped = self._stop_reason(problem, space, history, tried, stale) if not batch else ""
            while batch:
                compiled, failed = ready.result()
                upcoming: list[Proposal] = []
                if pool is not None:
                    upcoming = self._propose(
                        problem, space, history, tried, round_no + 1, {p.config.name for p in batch}
                    )
                    ready = self._submit(pool, upcoming)
                outcomes = self.round.execute(problem, self.executor, compiled, failed, tried=tried)
                self.gpu_seconds += sum(o.gpu_seconds for o in outcomes.values())
                records = self.round.records(batch, outcomes, round_no=round_no)
                self.campaign_done += len(records)
                self.executed += len(records)
                self.storage.record(s.name, problem.key, records)
                history += records
                tried.update(r.name for r in records)
                executed += len(records)
                self.round.observe(problem, space, records)
                self.round.learn(
                    problem, space, records, stream=self.stream(problem), round_no=round_no
                )
                self._learn_cublaslt_kernels(problem, outcomes.values())
                round_best = max(
                    (r.reward for r in records if r.status == CandidateStatus.OK), default=-math.inf
                )
                stale = 0 if round_best > best else stale + 1
                best = max(best, round_best)
                self._report(problem, history)
                for record in records:
                    if self.after_record is not None:
                        self.after_record(record)
                round_no += 1
                stopped = self._stop_reason(problem, space, history, tried, stale)
                if stopped:
                    break
                if pool is None:
                    upcoming = self._propose(problem, space, history, tried, round_no, set())
                    ready = self._submit(None, upcoming)
                batch = upcoming
            stopped = stopped or self._stop_reason(problem, space, history, tried, stale)
            stopped = stopped or "exhausted"
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self.storage.set_problem_status(s.name, problem.key, stopped)
        return ProblemResult(problem, history, stopped, executed)

    # -- steps ---------------------------------------------------------------------------------
    def _propose(
        self,
        problem: Problem,
        space: SearchSpace,
        history: list[CandidateRecord],
        tried: set[str],
        round_no: int,
        in_flight: set[str],
    ) -> list[Proposal]:
        s = self.settings
        if s.gpu_seconds is not None and self.gpu_seconds >= s.gpu_seconds:
            return []
        return self.round.propose(
            problem,
            space,
            history,
            round_no=round_no,
            exclude=tried | in_flight,
            in_flight=len(in_flight),
        )

    def _submit(
        self, pool: ThreadPoolExecutor | None, batch: list[Proposal]
    ) -> Future[tuple[list[CompiledCandidate], dict[str, Outcome]]]:
        needs = self.executor.needs_libraries
        if pool is not None:
            return pool.submit(self.round.compile, batch, needs_libraries=needs)
        future: Future[tuple[list[CompiledCandidate], dict[str, Outcome]]] = Future()
        future.set_result(self.round.compile(batch, needs_libraries=needs))
        return future

    def _learn_cublaslt_kernels(self, problem: Problem, outcomes: Iterable[Outcome]) -> None:
        """What cuBLASLt ran beside the batch, to the proposers that copy it."""
        kernels = next((o.cublaslt_kernels for o in outcomes if o.cublaslt_kernels), None)
        if not kernels:
            return
        for proposer in self.proposers.values():
            if isinstance(proposer, LearnsCublasLtKernels):
                proposer.learn_cublaslt_kernels(problem, kernels)

    def _stop_reason(
        self,
        problem: Problem,
        space: SearchSpace,
        history: list[CandidateRecord],
        tried: set[str],
        stale: int,
    ) -> str:
        s = self.settings
        if len(history) >= s.budget:
            return "budget"
        if s.gpu_seconds is not None and self.gpu_seconds >= s.gpu_seconds:
            return "gpu_budget"
        if len(tried & space.by_name.keys()) >= len(space):
            return "exhausted"
        if s.patience is not None and stale >= s.patience:
            return "no_improvement"
        if (
            s.min_entropy is not None
            and self.policy is not None
            and s.mix.get("rl", 0) > 0
            and self.policy.entropy(problem, space, tried) < s.min_entropy
        ):
            return "converged"
        return ""

    def _report(self, problem: Problem, history: list[CandidateRecord]) -> None:
        if self.progress is None:
            return
        result = ProblemResult(problem, history, "")
        elapsed = time.monotonic() - self.started
        total = self.settings.budget * len(self.problems)
        remaining = max(0, total - self.campaign_done)
        eta = elapsed / self.executed * remaining if self.executed else None
        self.progress(
            Progress(
                problem=problem,
                done=len(history),
                budget=self.settings.budget,
                best=result.best_speedups(self.settings.baseline),
                failed=sum(r.status != CandidateStatus.OK for r in history),
                campaign_done=self.campaign_done,
                campaign_total=total,
                elapsed=elapsed,
                eta=eta,
            )
        )


def campaign_report(
    results: Sequence[ProblemResult], settings: CampaignSettings, *, executor: str = ""
) -> dict[str, Any]:
    """The results JSON: per problem, the search's best candidate over the campaign's baseline
    (its speedups over every baseline, all of that one candidate) and the counts."""
    problems = []
    for result in results:
        ok = [r for r in result.records if r.status == CandidateStatus.OK]
        gpu = sum(r.gpu_seconds for r in result.records)
        reasons: dict[str, int] = {}
        for r in result.records:
            if r.status != CandidateStatus.OK:
                reasons[r.reason or r.status] = reasons.get(r.reason or r.status, 0) + 1
        best = result.best(settings.baseline)
        problems.append(
            {
                "problem": result.problem.key,
                "stopped": result.stopped,
                "candidates": len(result.records),
                "executed_this_run": result.executed,
                "verified": len(ok),
                "failures": reasons,
                "gpu_seconds": gpu,
                "verified_per_gpu_hour": len(ok) / (gpu / 3600) if gpu > 0 else None,
                "best": best.name if best else None,
                "best_knobs": dict(best.knobs) if best else None,
                "best_speedups": result.best_speedups(settings.baseline),
                "best_so_far": result.best_so_far(settings.baseline),
                "by_proposer": _by_proposer(result.records),
            }
        )
    return {"settings": settings.to_dict(), "executor": executor, "problems": problems}


def _by_proposer(records: Sequence[CandidateRecord]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in records:
        entry = out.setdefault(r.proposer, {"candidates": 0, "best_reward": -math.inf})
        entry["candidates"] += 1
        entry["best_reward"] = max(entry["best_reward"], r.reward)
    return out
