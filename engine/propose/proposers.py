"""Proposers: given a problem, its search space and what has been tried, name the next configs.

All proposers share one interface (``propose`` then ``observe``) and only choose untried members
of the SearchSpace, so every proposal is valid for the problem. A campaign mixes them by weight
(``{"rl": 0.5, "evolve": 0.3, "random": 0.2}``): each batch is split by largest remainder, and a
proposer that comes up short (evolve with nothing measured yet) leaves its share to the others.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from engine.codegen import KernelConfig, get_family
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.policy import Policy
from engine.propose.space import OTHER_FAMILY_DISTANCE, SearchSpace


@dataclass(frozen=True)
class Proposal:
    config: KernelConfig
    proposer: str
    parent: str | None = None
    # Model-written candidates (engine.llm): the source and what produced it (prompt, answer, …).
    source: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


class Proposer(Protocol):
    name: str

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        """Up to ``n`` proposals of configs in ``space`` whose names are not in ``exclude``."""
        ...

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        """Learn from a batch of results (only the learned policy does)."""
        ...


@runtime_checkable
class LearnsCublasLtKernels(Protocol):
    """A proposer that uses what cuBLASLt runs on a problem, learned from the GPU steps."""

    def learn_cublaslt_kernels(self, problem: Problem, kernels: Mapping[str, Any]) -> None:
        """``kernels``: engine.timing.cublaslt_kernels.from_record of a measurement of
        ``problem``."""
        ...


class RandomProposer:
    """Uniform over the untried valid configs."""

    name = "random"

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        untried = [c for c in space.configs if c.name not in exclude]
        return [Proposal(c, self.name) for c in rng.sample(untried, min(n, len(untried)))]

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        return None


class EvolveProposer:
    """Mutates the top-k measured configs: each child differs from a random top-k parent in one
    or two knobs (the nearest untried valid config when no such neighbour is left)."""

    name = "evolve"

    def __init__(self, top_k: int = 4, max_knobs: int = 2) -> None:
        self.top_k = top_k
        self.max_knobs = max_knobs

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        measured = sorted(
            (r for r in history if r.status == CandidateStatus.OK and r.name in space),
            key=lambda r: r.reward,
            reverse=True,
        )
        parents = [r.name for r in measured[: self.top_k]]
        if not parents:
            return []
        taken = set(exclude)
        out: list[Proposal] = []
        for _ in range(n):
            parent = rng.choice(parents)
            distances = space.distances(parent)
            untried = [
                (int(d), i)
                for i, d in enumerate(distances)
                if space.configs[i].name not in taken and d < OTHER_FAMILY_DISTANCE
            ]
            if not untried:
                continue
            near = [i for d, i in untried if d <= self.max_knobs]
            if not near:
                closest = min(d for d, _ in untried)
                near = [i for d, i in untried if d == closest]
            child = space.configs[rng.choice(near)]
            taken.add(child.name)
            out.append(Proposal(child, self.name, parent))
        return out

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        return None


OTHER_LAYOUT_DISTANCE = 0.5  # the same shape in the other layout: nearer than any other shape
TRANSFER_TOP = 4  # the configs carried over from each other problem


def problem_distance(a: Problem, b: Problem) -> float:
    """How far apart two problems are for carrying a winner over: octaves of M, N and K, plus
    OTHER_LAYOUT_DISTANCE when the layouts differ."""
    octaves = sum(abs(math.log2(x / y)) for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k)))
    return octaves + (OTHER_LAYOUT_DISTANCE if a.layout != b.layout else 0.0)


class TransferProposer:
    """Carries winners over from other problems: the best ``top`` configs measured for each
    problem it knows (``known`` results, e.g. from earlier campaigns in the same database, and
    every result it observes), nearest problems first (:func:`problem_distance`: this very
    problem in an earlier campaign, then the same shape in the other layout, then other
    shapes), each in this problem's layout, where valid here and untried. Rank by rank: the
    nearest problems' best, then their second best, and so on. Model-written candidates (their
    own source) do not carry over."""

    name = "transfer"

    def __init__(
        self, known: Sequence[tuple[Problem, CandidateRecord]] = (), *, top: int = TRANSFER_TOP
    ) -> None:
        self.top = top
        self._problems: dict[str, Problem] = {}
        self._best: dict[str, dict[str, tuple[float, str, Mapping[str, Any]]]] = {}
        for problem, record in known:
            self._add(problem, record)

    def _add(self, problem: Problem, record: CandidateRecord) -> None:
        if record.status != CandidateStatus.OK or record.source is not None:
            return
        self._problems[problem.key] = problem
        best = self._best.setdefault(problem.key, {})
        if record.reward > best.get(record.name, (-math.inf,))[0]:
            best[record.name] = (record.reward, record.family, record.knobs)

    def winners(self, problem_key: str) -> list[tuple[str, Mapping[str, Any]]]:
        """(family, knobs) of a problem's best ``top`` configs, best first."""
        ranked = sorted(self._best.get(problem_key, {}).values(), key=lambda w: -w[0])
        return [(family, knobs) for _, family, knobs in ranked[: self.top]]

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        others = sorted(
            self._problems.values(), key=lambda p: (problem_distance(problem, p), p.key)
        )
        ranked = [(p.key, self.winners(p.key)) for p in others]
        taken = set(exclude)
        out: list[Proposal] = []
        for rank in range(self.top):
            for source, winners in ranked:
                if len(out) >= n:
                    return out
                if rank >= len(winners):
                    continue
                config = carried_over(*winners[rank], problem)
                if config is None or config.name not in space or config.name in taken:
                    continue
                taken.add(config.name)
                out.append(Proposal(config, self.name, meta={"carried_from": source}))
        return out

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        for record in records:
            self._add(problem, record)


def carried_over(family: str, knobs: Mapping[str, Any], problem: Problem) -> KernelConfig | None:
    """The config with these knobs in ``problem``'s layout; None where the family or a knob is
    unknown here (a result from another version of the engine)."""
    try:
        return get_family(family).from_knobs({**knobs, "layout": problem.layout.value})
    except (KeyError, ValueError, TypeError):
        return None


class PolicyProposer:
    """Samples the learned policy without replacement, seeded from the round's ``rng``. It learns
    nothing itself: the round teaches the policy (engine.campaign.round.Round.learn), once per
    round, so that a proposer rebuilt from a stored history does not learn that history again."""

    name = "rl"

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        import torch  # the policy's sampling; torch loads only when a policy proposes

        generator = torch.Generator().manual_seed(rng.getrandbits(63))
        configs = self.policy.sample(problem, space, n, exclude=exclude, generator=generator)
        return [Proposal(c, self.name) for c in configs]

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        return None


def split_batch(n: int, mix: Mapping[str, float]) -> dict[str, int]:
    """``n`` slots shared by weight (largest remainder; ties to the first listed)."""
    total = sum(w for w in mix.values() if w > 0)
    if total <= 0:
        raise ValueError("the proposer mix needs a positive weight")
    exact = {name: n * w / total for name, w in mix.items() if w > 0}
    counts = {name: math.floor(x) for name, x in exact.items()}
    order = sorted(exact, key=lambda name: -(exact[name] - counts[name]))
    for name in order[: n - sum(counts.values())]:
        counts[name] += 1
    return counts


def propose_batch(
    proposers: Mapping[str, Proposer],
    mix: Mapping[str, float],
    problem: Problem,
    space: SearchSpace,
    n: int,
    *,
    history: Sequence[CandidateRecord],
    exclude: set[str],
    rng: random.Random,
) -> list[Proposal]:
    """One batch from the mix; shortfalls go to the next proposers, then to random."""
    out: list[Proposal] = []
    taken = set(exclude)
    shortfall = 0
    counts = split_batch(n, mix)
    names = [name for name in mix if name in counts]
    for index, name in enumerate([*names, "random"]):
        fallback = index == len(names)
        want = (0 if fallback else counts[name]) + shortfall
        if want <= 0:
            continue
        proposer = proposers.get(name) or RandomProposer()
        got = proposer.propose(problem, space, want, history=history, exclude=taken, rng=rng)
        got = [p for p in got if p.config.name not in taken][:want]
        taken.update(p.config.name for p in got)
        out += got
        shortfall = want - len(got)
    return out
