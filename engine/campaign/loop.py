"""The campaign loop: the rounds of engine.campaign.round, for every problem at once, in one
process.

Each problem's rounds run until a stop: the candidate budget, the campaign's GPU-seconds budget
(checked as each round is proposed, so the rounds already proposed still run), the space
exhausted, no better candidate for ``patience`` rounds, or the policy converged (its entropy over
the untried configs below ``min_entropy``). A round is proposed for every unfinished problem,
the rounds are compiled together in one batch (every core busy), then run on the GPU one after
another; a problem's round n+1 is proposed once its round n was rewarded and learnt (the policy
learns each problem in round order) and, when the executor needs compiled libraries, it is built
in a background thread while the GPU runs the other problems' rounds (``pipeline=False``: built
when the GPU has nothing left to run, so the GPU waits for each batch). A replay executor needs
only names. Every outcome is stored before its problem's next round, and names already stored
are never executed again: a stopped campaign resumes where it was.

What a round proposes, how its outcomes become records, their rewards and what the policy learns
are engine.campaign.round's: the web app's Celery steps run the same rounds. Reward =
log(best baseline time / candidate time) in the executor's protocol, baseline
``cublaslt_autotune`` (best of both layouts) by default; a failure (compile error, rejection,
timeout) gets ``failure_reward`` and its reason is stored. :meth:`Campaign.throughput` says what
the run felt like: wall time, the GPU's busy share, the first verified kernel, candidates per
wall-hour and where the compiles went.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
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
from engine.codegen import KernelConfig
from engine.compilation.compile import compile_configs
from engine.config import load as load_config
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


@dataclass
class ShapeRun:
    """One problem's search while the campaign runs: its history and where its rounds are."""

    problem: Problem
    space: SearchSpace
    history: list[CandidateRecord]
    tried: set[str]
    round_no: int  # the next round's number
    best: float  # the best reward of a verified candidate so far
    stale: int = 0  # rounds since the best improved
    executed: int = 0
    stopped: str = ""


@dataclass(frozen=True)
class PendingRound:
    shape: ShapeRun
    round_no: int
    batch: list[Proposal]


@dataclass(frozen=True)
class BuiltRound:
    pending: PendingRound
    compiled: list[CompiledCandidate]
    failed: dict[str, Outcome]


Builds = tuple[list[CompiledCandidate], dict[str, Outcome]]  # built, and the failures' outcomes
Build = Callable[[Sequence[Proposal]], Builds]


class CompileQueue:
    """The rounds proposed and not yet run, and their builds (a config that several rounds
    proposed is built once).

    Rounds are handed out in the order they were submitted (so what is learnt before each
    proposal, and so every proposal, does not depend on how long builds take). With ``jobs``
    (background): every config is its own build on a pool of ``jobs`` threads, so the rounds
    submitted together build at once on every core, while the GPU runs the rounds before them.
    Without: the rounds waiting are built together, in one compiler call, when the next round is
    asked for."""

    def __init__(
        self, build: Build, *, jobs: int | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._build = build
        self._clock = clock
        self.background = jobs is not None
        self._pool = ThreadPoolExecutor(max(1, jobs), "compile") if jobs is not None else None
        self._builds: dict[str, Future[Builds]] = {}
        self._order: deque[PendingRound] = deque()  # submitted and not yet handed out
        self._waiting: list[PendingRound] = []  # without a pool: not yet built
        self._built: dict[int, BuiltRound] = {}  # by id() of its PendingRound
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._running = 0  # builds running now
        self._running_since = 0.0
        # the configs of each build together (background: of each submission, built at once)
        self.batches: list[int] = []
        self.build_seconds = 0.0  # wall time while at least one build ran
        self.waited_seconds = 0.0  # time the GPU's thread waited for a round to be built

    def submit(self, rounds: Sequence[PendingRound]) -> None:
        with self._changed:
            self._order.extend(rounds)
        if self._pool is None:
            self._waiting.extend(rounds)
            return
        self.batches.append(len({p.config.name for pending in rounds for p in pending.batch}))
        for pending in rounds:
            builds = [self._build_of(p) for p in pending.batch]
            left = [len(builds)]
            for build in builds:
                build.add_done_callback(lambda _f, r=pending, b=builds, n=left: self._done(r, b, n))
            if not builds:
                self._done(pending, [], [1])

    def next_built(self) -> BuiltRound:
        """The round submitted first, once built: waits for its builds, or builds the rounds
        waiting."""
        started = self._clock()
        try:
            with self._changed:
                if not self._order:
                    raise RuntimeError("no round was submitted")
                head = id(self._order[0])
                while head not in self._built:
                    if self._error is not None:
                        raise self._error
                    if self._pool is not None:
                        self._changed.wait()
                    else:
                        rounds, self._waiting = self._waiting, []
                        for built in self._build_together(rounds):
                            self._built[id(built.pending)] = built
                self._order.popleft()
                return self._built.pop(head)
        finally:
            self.waited_seconds += self._clock() - started

    def close(self) -> None:
        """Drops the builds not started (a build in progress is not cut short)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- background: a build per config --------------------------------------------------------
    def _build_of(self, proposal: Proposal) -> Future[Builds]:
        name = proposal.config.name
        if name not in self._builds:
            assert self._pool is not None
            self._builds[name] = self._pool.submit(self._timed_build, proposal)
        return self._builds[name]

    def _timed_build(
        self, proposal: Proposal
    ) -> tuple[list[CompiledCandidate], dict[str, Outcome]]:
        with self._changed:
            if self._running == 0:
                self._running_since = self._clock()
            self._running += 1
        try:
            return self._build([proposal])
        finally:
            with self._changed:
                self._running -= 1
                if self._running == 0:
                    self.build_seconds += self._clock() - self._running_since

    def _done(
        self,
        pending: PendingRound,
        builds: Sequence[Future[Builds]],
        left: list[int],
    ) -> None:
        with self._changed:
            left[0] -= 1
            if left[0] > 0:
                return
            try:
                compiled = [c for build in builds for c in build.result()[0]]
                failed = {n: o for build in builds for n, o in build.result()[1].items()}
            except BaseException as exc:  # a build that raised, or was cancelled by close()
                self._error = self._error or exc
            else:
                self._built[id(pending)] = BuiltRound(pending, compiled, failed)
            self._changed.notify_all()

    # -- in the GPU's thread: the rounds waiting, in one call ----------------------------------
    def _build_together(self, rounds: Sequence[PendingRound]) -> list[BuiltRound]:
        unique: dict[str, Proposal] = {}
        for pending in rounds:
            for proposal in pending.batch:
                unique.setdefault(proposal.config.name, proposal)
        self.batches.append(len(unique))
        started = self._clock()
        compiled, failed = self._build(list(unique.values()))
        self.build_seconds += self._clock() - started
        by_name = {c.name: c for c in compiled}
        out = []
        for pending in rounds:
            names = [p.config.name for p in pending.batch]
            out.append(
                BuiltRound(
                    pending,
                    [by_name[n] for n in names if n in by_name],
                    {n: failed[n] for n in names if n in failed},
                )
            )
        return out


@dataclass
class CompileCount:
    """What the campaign's compiler calls built and what they found in the cache."""

    built: int = 0
    cached: int = 0
    failed: int = 0
    build_seconds: float = 0.0  # the builds' own times, summed over parallel jobs
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def counting(self, compiler: Compiler) -> Compiler:
        def compile_and_count(configs: Sequence[Any]) -> list[Any]:
            results = compiler(configs)
            with self.lock:
                self._count(results)
            return results

        return compile_and_count

    def _count(self, results: Sequence[Any]) -> None:
        for result in results:
            if getattr(result, "cached", False):
                self.cached += 1
            elif getattr(result, "ok", False):
                self.built += 1
                self.build_seconds += float(getattr(result, "seconds", 0.0) or 0.0)
            else:
                self.failed += 1


class Campaign:
    """Every problem's rounds at once: a round for each unfinished problem is proposed, the
    rounds are built together (:class:`CompileQueue`), and run on the GPU one after another; a
    problem's next round is proposed once its round was rewarded and learnt, and is built while
    the GPU runs the other problems' rounds.

    ``learner``: where the policy learns each round (engine.propose.policy.PolicyFile or
    InMemoryLearner; None: it does not learn online). ``policy``: the one the rl proposer
    samples, for the entropy stop. ``compile_jobs``: the builds at once (default: the engine
    configuration's, ENGINE_COMPILE_JOBS or every core). ``before_first_builds``: shown the
    configs of the first rounds before they build (when the executor needs libraries), e.g. to
    say how long building them will take. ``clock``: what the run's times are read from."""

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
        compile_jobs: int | None = None,
        before_first_builds: Callable[[Sequence[KernelConfig]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.problems = list(problems)
        self.compile_jobs = compile_jobs
        self.before_first_builds = before_first_builds
        self.clock = clock
        self.settings = settings
        self.executor = executor
        self.storage = storage
        self.proposers = dict(proposers)
        self.space_for = space_for
        self.policy = policy
        self.compiles = CompileCount()
        self.round = Round(
            settings.round_settings(),
            proposers,
            learner=learner,
            compiler=self.compiles.counting(compiler or compile_configs),
        )
        self.progress = progress
        self.after_record = after_record
        self.gpu_seconds = 0.0
        self.campaign_done = 0
        self.executed = 0
        self.started = clock()
        self.times = SearchTimes()
        self.queue: CompileQueue | None = None

    # -- the campaign ------------------------------------------------------------------------
    def run(self) -> list[ProblemResult]:
        s = self.settings
        self.storage.open_campaign(s.name, s.to_dict())
        for problem in self.problems:
            self.storage.add_problem(s.name, problem)
            stored = self.storage.candidates(s.name, problem.key)
            self.campaign_done += len(stored)
            self.gpu_seconds += sum(r.gpu_seconds for r in stored)
        self.started = self.clock()
        self.times = SearchTimes()
        starts = [self._start(problem) for problem in self.problems]
        shapes = [shape for shape in starts if isinstance(shape, ShapeRun)]
        background = s.pipeline and self.executor.needs_libraries
        jobs = (self.compile_jobs or load_config().compile_jobs) if background else None
        self.queue = queue = CompileQueue(self._build, jobs=jobs, clock=self.clock)
        try:
            first = [pending for shape in shapes if (pending := self._next_round(shape))]
            if self.before_first_builds is not None and self.executor.needs_libraries:
                configs = {p.config.name: p.config for pending in first for p in pending.batch}
                self.before_first_builds(list(configs.values()))
            queue.submit(first)
            in_flight = len(first)
            while in_flight:
                built = queue.next_built()
                in_flight -= 1
                shape = built.pending.shape
                self._run_round(built)
                if not shape.stopped and (pending := self._next_round(shape)):
                    queue.submit([pending])
                    in_flight += 1
        finally:
            queue.close()
            self.times.search_seconds = self.clock() - self.started
        return [
            ProblemResult(start.problem, start.history, start.stopped, start.executed)
            if isinstance(start, ShapeRun)
            else start
            for start in starts
        ]

    def stream(self, problem: Problem) -> str:
        return f"{self.settings.name}/{problem.key}"

    def throughput(self) -> dict[str, Any]:
        """What a user of this run felt (:meth:`SearchTimes.to_dict`), and its compiles."""
        queue = self.queue
        return self.times.to_dict(
            candidates=self.executed,
            compiles={
                "batches": len(queue.batches) if queue else 0,
                "largest_batch": max(queue.batches, default=0) if queue else 0,
                "built": self.compiles.built,
                "cached": self.compiles.cached,
                "failed": self.compiles.failed,
                "build_seconds": round(self.compiles.build_seconds, 3),
                "wall_seconds": round(queue.build_seconds, 3) if queue else 0.0,
                "gpu_waited_seconds": round(queue.waited_seconds, 3) if queue else 0.0,
                "background": queue.background if queue else False,
            },
        )

    # -- a problem's rounds --------------------------------------------------------------------
    def _start(self, problem: Problem) -> ShapeRun | ProblemResult:
        """The problem's search where it was (resumed), or its result when it had ended."""
        s = self.settings
        history = self.storage.candidates(s.name, problem.key)
        status = self.storage.problem_status(s.name, problem.key)
        if status in FINAL and not (status == "budget" and len(history) < s.budget):
            return ProblemResult(problem, history, status or "")
        self.storage.set_problem_status(s.name, problem.key, "running")
        space = self.space_for(problem)
        round_no = max((r.round for r in history), default=-1) + 1
        if history:  # resumed: what the proposers keep, and the last round learnt (once)
            self.round.observe(problem, space, history)
            last = [r for r in history if r.round == round_no - 1]
            stream = self.stream(problem)
            self.round.learn(problem, space, last, stream=stream, round_no=round_no - 1)
        best = max((r.reward for r in history if r.status == CandidateStatus.OK), default=-math.inf)
        tried = {r.name for r in history}
        return ShapeRun(problem, space, history, tried, round_no, best)

    def _next_round(self, shape: ShapeRun) -> PendingRound | None:
        """The shape's next round, or None when it stops (its status stored)."""
        batch = self._propose(shape)
        if batch:
            return PendingRound(shape, shape.round_no, batch)
        self._stop(shape, self._stop_reason(shape) or "exhausted")
        return None

    def _build(self, batch: Sequence[Proposal]) -> Builds:
        return self.round.compile(batch, needs_libraries=self.executor.needs_libraries)

    def _run_round(self, built: BuiltRound) -> None:
        """Runs a built round on the GPU, stores and learns its records, and stops its shape
        when a stop rule says so."""
        s = self.settings
        shape, round_no = built.pending.shape, built.pending.round_no
        problem, space = shape.problem, shape.space
        on_gpu = self.clock()
        outcomes = self.round.execute(
            problem, self.executor, built.compiled, built.failed, tried=shape.tried
        )
        self.times.gpu_busy_seconds += self.clock() - on_gpu
        self.gpu_seconds += sum(o.gpu_seconds for o in outcomes.values())
        records = self.round.records(built.pending.batch, outcomes, round_no=round_no)
        self.campaign_done += len(records)
        self.executed += len(records)
        self.storage.record(s.name, problem.key, records)
        if self.times.first_verified_seconds is None and any(r.status == "ok" for r in records):
            self.times.first_verified_seconds = self.clock() - self.started
        shape.history += records
        shape.tried.update(r.name for r in records)
        shape.executed += len(records)
        self.round.observe(problem, space, records)
        self.round.learn(problem, space, records, stream=self.stream(problem), round_no=round_no)
        self._learn_cublaslt_kernels(problem, outcomes.values())
        round_best = max(
            (r.reward for r in records if r.status == CandidateStatus.OK), default=-math.inf
        )
        shape.stale = 0 if round_best > shape.best else shape.stale + 1
        shape.best = max(shape.best, round_best)
        shape.round_no = round_no + 1
        self._report(problem, shape.history)
        for record in records:
            if self.after_record is not None:
                self.after_record(record)
        if stopped := self._stop_reason(shape):
            self._stop(shape, stopped)

    def _stop(self, shape: ShapeRun, reason: str) -> None:
        shape.stopped = reason
        self.storage.set_problem_status(self.settings.name, shape.problem.key, reason)

    # -- steps ---------------------------------------------------------------------------------
    def _propose(self, shape: ShapeRun) -> list[Proposal]:
        s = self.settings
        if s.gpu_seconds is not None and self.gpu_seconds >= s.gpu_seconds:
            return []
        return self.round.propose(
            shape.problem,
            shape.space,
            shape.history,
            round_no=shape.round_no,
            exclude=set(shape.tried),
        )

    def _learn_cublaslt_kernels(self, problem: Problem, outcomes: Iterable[Outcome]) -> None:
        """What cuBLASLt ran beside the batch, to the proposers that copy it."""
        kernels = next((o.cublaslt_kernels for o in outcomes if o.cublaslt_kernels), None)
        if not kernels:
            return
        for proposer in self.proposers.values():
            if isinstance(proposer, LearnsCublasLtKernels):
                proposer.learn_cublaslt_kernels(problem, kernels)

    def _stop_reason(self, shape: ShapeRun) -> str:
        s = self.settings
        if len(shape.history) >= s.budget:
            return "budget"
        if s.gpu_seconds is not None and self.gpu_seconds >= s.gpu_seconds:
            return "gpu_budget"
        if len(shape.tried & shape.space.by_name.keys()) >= len(shape.space):
            return "exhausted"
        if s.patience is not None and shape.stale >= s.patience:
            return "no_improvement"
        if (
            s.min_entropy is not None
            and self.policy is not None
            and s.mix.get("rl", 0) > 0
            and self.policy.entropy(shape.problem, shape.space, shape.tried) < s.min_entropy
        ):
            return "converged"
        return ""

    def _report(self, problem: Problem, history: list[CandidateRecord]) -> None:
        if self.progress is None:
            return
        result = ProblemResult(problem, history, "")
        elapsed = self.clock() - self.started
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


@dataclass
class SearchTimes:
    """The search's wall time, the part of it the executor held the GPU, and when the first
    verified kernel came (seconds from the search's start)."""

    search_seconds: float = 0.0
    gpu_busy_seconds: float = 0.0
    first_verified_seconds: float | None = None

    def to_dict(self, *, candidates: int, compiles: Mapping[str, Any]) -> dict[str, Any]:
        wall = self.search_seconds
        return {
            "search_seconds": round(wall, 3),
            "gpu_busy_seconds": round(self.gpu_busy_seconds, 3),
            "gpu_busy_fraction": round(self.gpu_busy_seconds / wall, 4) if wall > 0 else None,
            "first_verified_seconds": _rounded(self.first_verified_seconds),
            "candidates": candidates,
            "candidates_per_wall_hour": round(candidates / wall * 3600, 1) if wall > 0 else None,
            "compiles": dict(compiles),
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def campaign_report(
    results: Sequence[ProblemResult],
    settings: CampaignSettings,
    *,
    executor: str = "",
    throughput: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The results JSON: per problem, the search's best candidate over the campaign's baseline
    (its speedups over every baseline, all of that one candidate) and the counts; with
    ``throughput`` (:meth:`Campaign.throughput`), what the run's user felt."""
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
    report = {"settings": settings.to_dict(), "executor": executor, "problems": problems}
    if throughput is not None:
        report["throughput"] = dict(throughput)
    return report


def _by_proposer(records: Sequence[CandidateRecord]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in records:
        entry = out.setdefault(r.proposer, {"candidates": 0, "best_reward": -math.inf})
        entry["candidates"] += 1
        entry["best_reward"] = max(entry["best_reward"], r.reward)
    return out
