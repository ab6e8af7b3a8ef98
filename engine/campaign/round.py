"""One round of a campaign for one problem: propose → compile → execute → records → learn.

Both front-ends run their rounds through this module: engine.campaign.loop (``engine optimize``,
every round in one process) and webapp.campaigns.runner (a round is a compile step and a GPU step,
two Celery tasks, with the database between them). They differ only in storage, scheduling and
leases; what is proposed, how a compile or run outcome becomes a CandidateRecord, its reward and
what the policy learns are decided here, once:

- a round's randomness comes from (campaign seed, problem, round number) alone
  (:func:`round_rng`), never from state carried between rounds, so a round proposed by a Celery
  worker that has just started draws what the CLI's long-lived process draws;
- :func:`compile_failure` is the one classification of a build that failed;
- :func:`candidate_record` is the one place a CandidateRecord is made, with :func:`reward_of`;
- the policy learns each round's rewards once, in round order (:class:`PolicyLearner`).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.codegen import KernelConfig, get_family
from engine.compilation.compile import CompileResult
from engine.execution.executor import CompiledCandidate, GpuExecutor, Outcome
from engine.execution.reward import reward_of
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.mix import DEFAULT_MIX
from engine.propose.proposers import Proposal, Proposer, propose_batch
from engine.propose.seed import FAMILY_FLOOR, SeedProposer, with_family_floor
from engine.propose.space import SearchSpace
from engine.timing.baseline_names import NVIDIA

DEFAULT_BASELINE = "cublaslt_autotune"
# the proposers that search the families' configs; a mix with one of them gets the family floor
FLOOR_PROPOSERS = frozenset({"seed", "rl", "evolve", "random"})
FAILURE_REWARD = -2.0  # log speedup of 0.14x: below every recorded kernel but a few
# A shape's budget is spent in at least this many rounds, so that the policy's online update and
# the evolutionary proposer (which mutates what was measured) act within the shape.
ROUNDS_PER_SHAPE = 4
MAX_BATCH = 8  # the verification jobs one GPU step runs at once by default

Compiler = Callable[[Sequence[KernelConfig]], list[CompileResult]]


def batch_size_for(budget: int, *, cap: int = MAX_BATCH, rounds: int = ROUNDS_PER_SHAPE) -> int:
    """Candidates per round: the budget over ``rounds`` rounds (rounded up), at most ``cap``."""
    return max(1, min(cap, math.ceil(budget / rounds)))


def round_seed(seed: int, problem_key: str, round_no: int) -> int:
    return zlib.crc32(f"{seed}/{problem_key}/{round_no}".encode())


def round_rng(seed: int, problem_key: str, round_no: int) -> random.Random:
    """The one source of a round's randomness (the policy's sampler draws its seed from it)."""
    return random.Random(round_seed(seed, problem_key, round_no))


def build_failure(name: str, *, timed_out: bool, message: str) -> Outcome:
    """A candidate whose build failed or timed out (nvcc, or a compile step's hook)."""
    if timed_out:
        return Outcome(name, CandidateStatus.TIMEOUT, "nvcc_timeout", message)
    return Outcome(name, CandidateStatus.COMPILE_ERROR, "nvcc", message)


def compile_failure(name: str, result: CompileResult) -> Outcome | None:
    """None when ``result`` built a library; else the failure's outcome: rejected by the static
    gate (engine.llm's sources), timed out, or a compile error."""
    if result.ok and result.library is not None:
        return None
    if gate := getattr(result, "rejected_by", ""):
        return Outcome(name, CandidateStatus.REJECTED, gate, result.log)
    message = result.error or "did not compile"
    return build_failure(name, timed_out=result.timed_out, message=message)


def candidate_record(
    proposal: Proposal, outcome: Outcome, *, round_no: int, baseline: str, failure_reward: float
) -> CandidateRecord:
    """The stored record of one proposal's outcome, with its reward."""
    return CandidateRecord(
        name=outcome.name,
        family=proposal.config.FAMILY,
        knobs=proposal.config.knobs(),
        proposer=proposal.proposer,
        parent=proposal.parent,
        status=outcome.status,
        reason=outcome.reason,
        message=outcome.message,
        reward=reward_of(outcome, baseline, failure_reward),
        seconds=outcome.seconds,
        baselines=dict(outcome.baselines),
        timings=dict(outcome.timings),
        gpu_seconds=outcome.gpu_seconds,
        round=round_no,
        source=proposal.source,
        meta=dict(proposal.meta),
    )


def proposal_of(
    *, family: str, knobs: Mapping[str, Any], proposer: str, parent: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Proposal:  # fmt: skip
    """A proposal rebuilt from what was stored of it (a GPU step gets candidates, not proposals)."""
    config = get_family(family).from_knobs(dict(knobs))
    return Proposal(config, proposer, parent, meta=dict(meta or {}))


class PolicyLearner(Protocol):
    """What learns a round's rewards: engine.propose.policy.PolicyFile (shared through a file by
    several processes) or InMemoryLearner (one process)."""

    def learn(
        self,
        problem: Problem,
        space: SearchSpace,
        records: Sequence[CandidateRecord],
        *,
        stream: str,
        step: int,
    ) -> bool:
        """Learns ``records`` (round ``step`` of ``stream``) unless that round was learnt already;
        True when it learnt."""
        ...


@dataclass(frozen=True)
class RoundSettings:
    budget: int  # candidates per problem
    batch_size: int
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    baseline: str = DEFAULT_BASELINE
    failure_reward: float = FAILURE_REWARD
    seed: int = 0
    # candidates of each searched family a round until the family is measured on the shape
    family_floor: int = FAMILY_FLOOR

    def __post_init__(self) -> None:
        if self.baseline not in NVIDIA:  # the search's GPU steps time these, not TORCH_TUNED
            raise ValueError(f"unknown baseline {self.baseline!r}: expected one of {NVIDIA}")
        if self.budget < 1 or self.batch_size < 1:
            raise ValueError("budget and batch size must be at least 1")


@dataclass(frozen=True)
class RoundResult:
    batch: list[Proposal]
    records: list[CandidateRecord]


class Round:
    """The steps of a problem's rounds, for a campaign's settings and proposers.

    ``learner``: where the policy learns (None: the policy, if any, does not learn online).
    ``stream``: names this campaign's problem for the learner's once-per-round bookkeeping."""

    def __init__(
        self,
        settings: RoundSettings,
        proposers: Mapping[str, Proposer],
        *,
        learner: PolicyLearner | None = None,
        compiler: Compiler | None = None,
    ) -> None:
        self.settings = settings
        self.proposers = dict(proposers)
        self.learner = learner
        self.compiler = compiler
        self._floor_seed: SeedProposer | None = None

    # -- propose --------------------------------------------------------------------------------
    def room(self, history: Sequence[CandidateRecord], in_flight: int = 0) -> int:
        return self.settings.budget - len(history) - in_flight

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        history: Sequence[CandidateRecord],
        *,
        round_no: int,
        exclude: set[str],
        in_flight: int = 0,
    ) -> list[Proposal]:
        """Round ``round_no``'s batch: up to the batch size (and the budget's room) of untried
        configs, from the proposers by the mix, with the family floor (each searched family
        tried until measured: engine.propose.seed.with_family_floor)."""
        s = self.settings
        room = self.room(history, in_flight)
        if room <= 0:
            return []
        n = min(s.batch_size, room)
        rng = round_rng(s.seed, problem.key, round_no)
        batch = propose_batch(
            self.proposers, s.mix, problem, space, n, history=history, exclude=exclude, rng=rng
        )
        # a mix that only carries kernels in (transfer, mirror) or writes its own (llm) asked
        # for exactly those: the floor serves the mixes that search the families
        searching = bool(FLOOR_PROPOSERS & set(s.mix))
        return with_family_floor(
            batch,
            problem,
            space,
            n,
            history=history,
            exclude=exclude,
            rng=rng,
            seed=self.seed_proposer(),
            floor=s.family_floor if searching else 0,
        )

    def seed_proposer(self) -> SeedProposer:
        """The mix's seed proposer, else one of this round's own (its picks fill the floor)."""
        seed = self.proposers.get("seed")
        if isinstance(seed, SeedProposer):
            return seed
        if self._floor_seed is None:
            rl = self.proposers.get("rl")
            self._floor_seed = SeedProposer(policy=getattr(rl, "policy", None))
        return self._floor_seed

    # -- compile and execute ----------------------------------------------------------------------
    def compile(
        self, batch: Sequence[Proposal], *, needs_libraries: bool
    ) -> tuple[list[CompiledCandidate], dict[str, Outcome]]:
        """Compiled candidates, and failure outcomes for those that did not build."""
        configs = [p.config for p in batch]
        if not configs:
            return [], {}
        if not needs_libraries:
            return [CompiledCandidate(c.name, c) for c in configs], {}
        if self.compiler is None:
            raise ValueError("this round has no compiler, and its executor needs libraries")
        results = self.compiler(configs)
        compiled, failed = [], {}
        for config, result in zip(configs, results, strict=True):
            failure = compile_failure(config.name, result)
            if failure is None:
                compiled.append(CompiledCandidate(config.name, config, result.library))
            else:
                failed[config.name] = failure
        return compiled, failed

    @staticmethod
    def execute(
        problem: Problem,
        executor: GpuExecutor,
        compiled: Sequence[CompiledCandidate],
        failed: Mapping[str, Outcome],
        *,
        tried: set[str],
    ) -> dict[str, Outcome]:
        """Every candidate's outcome; a name in ``tried`` is never run again."""
        fresh = [c for c in compiled if c.name not in tried]
        outcomes = dict(failed)
        if fresh:
            for outcome in executor.execute(problem, fresh):
                outcomes[outcome.name] = outcome
        return outcomes

    # -- records and learning ---------------------------------------------------------------------
    def records(
        self, batch: Sequence[Proposal], outcomes: Mapping[str, Outcome], *, round_no: int
    ) -> list[CandidateRecord]:
        """The batch's records, in the batch's order (proposals without an outcome are left out)."""
        s = self.settings
        return [
            candidate_record(
                p,
                outcomes[p.config.name],
                round_no=round_no,
                baseline=s.baseline,
                failure_reward=s.failure_reward,
            )
            for p in batch
            if p.config.name in outcomes
        ]

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        """The proposers that keep what they saw (transfer) see ``records``; the policy does not
        learn here (:meth:`learn`), so showing a rebuilt round its history teaches nothing twice."""
        for proposer in self.proposers.values():
            proposer.observe(problem, space, records)

    def learn(
        self,
        problem: Problem,
        space: SearchSpace,
        records: Sequence[CandidateRecord],
        *,
        stream: str,
        round_no: int,
    ) -> bool:
        """The policy learns round ``round_no``'s records, once (True when it learnt now)."""
        if self.learner is None or not records:
            return False
        return self.learner.learn(problem, space, records, stream=stream, step=round_no)

    def run(
        self,
        problem: Problem,
        space: SearchSpace,
        history: Sequence[CandidateRecord],
        executor: GpuExecutor,
        *,
        round_no: int,
        tried: set[str],
        stream: str,
    ) -> RoundResult:
        """A whole round in this process: propose, compile, execute, records, learn."""
        batch = self.propose(problem, space, history, round_no=round_no, exclude=tried)
        compiled, failed = self.compile(batch, needs_libraries=executor.needs_libraries)
        outcomes = self.execute(problem, executor, compiled, failed, tried=tried)
        records = self.records(batch, outcomes, round_no=round_no)
        self.observe(problem, space, records)
        self.learn(problem, space, records, stream=stream, round_no=round_no)
        return RoundResult(batch, records)
