"""The seed proposer and the family floor: every searched family is tried on a shape early.

A campaign's learned policy, transfer and evolution reach a family only through what was
measured before; a family nobody measured on such shapes is never tried. So in the first round
of a shape the seed proposer offers each family's prior picks, the configs its own tuner would
try there:

- triton: what torch Inductor's max-autotune tries with its Triton mm template
  (engine.codegen.triton.inductor_configs, K-mask-free where K divides) and, on long-K shapes, its
  decompose-K splits as the family's in-kernel split-K (inductor_split_configs);
- longk: the library configs the first H100 run's long-K winners resemble most
  (engine.codegen.library.longk_prior);
- sm90 and sm80 (CUTLASS): the configs nearest to the kernels cuBLASLt runs on the problem, as
  the mirror proposer ranks them (engine.propose.mirror), from the kernels measured on the
  problem where known, else from the recorded kernels of the nearest recorded problem (the file
  ``python -m engine pretrain-policy`` ships beside the policy).

A family's picks are ranked by the learned policy where one is given, else in the tuner's own
order; a CUTLASS family's by their distance to cuBLASLt's kernels first, the policy breaking ties
(a policy that never saw such a shape must not trade the nearest copy of cuBLASLt's kernel for a
16×64 tile); the families take turns. After the first round it proposes nothing: its share
goes to the others.

:func:`with_family_floor` then keeps at least ``floor`` candidates of each searched family in a
round until the family has been measured on the shape (or failed ``FLOOR_TRIES`` times), in
place of the batch's last proposals of families that have more.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.codegen import KernelConfig
from engine.codegen.library import longk_prior
from engine.codegen.triton import inductor_configs, inductor_split_configs
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.mirror import MIRRORED_FAMILIES, Kernel, MirrorProposer
from engine.propose.policy import PRETRAINED_DIR, Policy
from engine.propose.proposers import Proposal, problem_distance
from engine.propose.space import SearchSpace

FAMILY_FLOOR = 1  # candidates of each searched family a round until it is measured on the shape
FLOOR_TRIES = 3  # failed candidates after which an unmeasured family is left to the search
RECORDED_KERNELS = PRETRAINED_DIR / "cublaslt_kernels.json"
KERNEL_FIELDS = (
    "tile_m",
    "tile_n",
    "tile_k",
    "stages",
    "cluster_m",
    "cluster_n",
    "splitk",
    "label",
)


def load_recorded_kernels(path: Path = RECORDED_KERNELS) -> dict[str, list[Kernel]]:
    """Problem key → the cuBLASLt kernels recorded for it (empty where the file is missing)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    kernels = data.get("kernels", {}) if isinstance(data, dict) else {}
    return {str(key): list(value) for key, value in kernels.items() if isinstance(value, list)}


def recorded_kernels_document(
    targets: Mapping[str, Sequence[Kernel]], *, sources: Sequence[str], per_problem: int = 3
) -> dict[str, Any]:
    """What RECORDED_KERNELS holds: each problem's first ``per_problem`` kernels (the autotuned
    pick first), with the fields mirror_distance reads."""
    return {
        "what": "cuBLASLt's kernels per recorded problem, the seed proposer's prior for CUTLASS",
        "sources": list(sources),
        "kernels": {
            key: [
                {f: kernel.get(f) for f in KERNEL_FIELDS} for kernel in list(kernels)[:per_problem]
            ]
            for key, kernels in sorted(targets.items())
            if kernels
        },
    }


def first_round(space: SearchSpace, history: Sequence[CandidateRecord], exclude: set[str]) -> bool:
    """Nothing of the shape measured, failed or in flight yet."""
    return not history and not any(name in space for name in exclude)


def triton_priors(problem: Problem) -> list[KernelConfig]:
    """What Inductor's max-autotune tries on ``problem``, in our Triton family: its decompose-K
    splits first where it drops the plain template (K at least 64 times M and N), else after."""
    plain: list[KernelConfig] = list(inductor_configs(problem))
    splits: list[KernelConfig] = list(inductor_split_configs(problem))
    long_k = problem.k >= 64 * max(problem.m, problem.n)
    return [*splits, *plain] if long_k else [*plain, *splits]


class SeedProposer:
    """Each searched family's prior picks, in a shape's first round only (module docstring)."""

    name = "seed"

    def __init__(
        self,
        targets: Mapping[str, Sequence[Kernel]] | None = None,
        *,
        recorded: Mapping[str, Sequence[Kernel]] | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.mirror = MirrorProposer(targets or {})
        if recorded is None:
            recorded = load_recorded_kernels()
        self.recorded = {k: list(v) for k, v in recorded.items()}
        self.policy = policy
        self.borrowed: set[str] = set()  # problems whose targets are a nearby problem's

    # -- the priors --------------------------------------------------------------------------
    def cublaslt_kernels(self, problem: Problem) -> list[Kernel]:
        """cuBLASLt's kernels on ``problem``: measured or given, else the nearest recorded
        problem's."""
        known = self.mirror.targets.get(problem.key)
        if known:
            return list(known)
        if not self.recorded:
            return []
        nearest = min(
            self.recorded,
            key=lambda key: (problem_distance(problem, Problem.parse(*key.split("_"))), key),
        )
        return list(self.recorded[nearest])

    def priors(self, problem: Problem, space: SearchSpace, family: str) -> list[KernelConfig]:
        """``family``'s prior picks among ``space``'s members, best first."""
        if family == "triton":
            picks = [c for c in triton_priors(problem) if c.name in space]
        elif family in MIRRORED_FAMILIES:
            if not self.mirror.targets.get(problem.key):
                self.mirror.targets[problem.key] = self.cublaslt_kernels(problem)
                self.borrowed.add(problem.key)
            ranking = [
                e
                for e in self.mirror.ranking(problem, space)
                if family == space.config(e[2]).FAMILY
            ]
            # the policy only breaks ties: a config nearer cuBLASLt's kernel goes first
            return self.ranked(
                problem,
                space,
                [space.config(name) for _, _, name, _ in ranking],
                tiers=[(distance, rank) for distance, rank, _, _ in ranking],
            )
        elif family == "longk":
            picks = [c for c in longk_prior(problem) if c.name in space]
        else:
            picks = []
        return self.ranked(problem, space, picks)

    def ranked(
        self,
        problem: Problem,
        space: SearchSpace,
        picks: list[KernelConfig],
        tiers: Sequence[tuple[float, int]] | None = None,
    ) -> list[KernelConfig]:
        """``picks`` by the policy's score, best first (a stable sort: ties keep their order);
        with ``tiers`` (one sort key a pick, lowest first), by tier and within one by score."""
        if (
            self.policy is None
            or not picks
            or any(c.FAMILY not in self.policy.families for c in picks)
        ):
            return picks
        import torch  # the policy's scores; torch loads only when a policy ranks

        with torch.no_grad():
            if {c.FAMILY for c in space.configs} <= set(self.policy.families):
                # the space's cached index matrix: a CUTLASS family's picks can be the mirror's
                # whole ranking (256 640 sm90 configs of a full 4096³ space: 0.44 s, not 3.2 s)
                everything = self.policy.scores(problem, space).tolist()
                scores = [everything[space.by_name[c.name]] for c in picks]
            else:
                logits = self.policy.logits(problem)
                scores = [float(logits[self.policy.indices(c)].sum()) for c in picks]
        tier = list(tiers) if tiers is not None else [(0.0, 0)] * len(picks)
        order = sorted(range(len(picks)), key=lambda i: (tier[i], -scores[i]))
        return [picks[i] for i in order]

    def family_picks(
        self,
        problem: Problem,
        space: SearchSpace,
        family: str,
        n: int,
        *,
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        """Up to ``n`` untried configs of ``family``: its prior picks, then any of its members."""
        out = [c for c in self.priors(problem, space, family) if c.name not in exclude][:n]
        if len(out) < n:
            chosen = {c.name for c in out}
            rest = [
                c
                for c in space.configs
                if family == c.FAMILY and c.name not in exclude and c.name not in chosen
            ]
            out += rng.sample(rest, min(n - len(out), len(rest)))
        return [Proposal(c, self.name, meta={"prior": family}) for c in out]

    # -- the proposer ------------------------------------------------------------------------
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
        if n <= 0 or not first_round(space, history, exclude):
            return []
        per_family = {
            family: [c for c in self.priors(problem, space, family) if c.name not in exclude]
            for family in self.families_in_turn(problem, space)
        }
        out: list[Proposal] = []
        taken = set(exclude)
        for rank in range(max((len(p) for p in per_family.values()), default=0)):
            for family, picks in per_family.items():
                if len(out) >= n:
                    return out
                if rank < len(picks) and picks[rank].name not in taken:
                    taken.add(picks[rank].name)
                    out.append(Proposal(picks[rank], self.name, meta={"prior": family}))
        return out

    def families_in_turn(self, problem: Problem, space: SearchSpace) -> list[str]:
        """The space's families, the policy's likeliest first (else in the space's order)."""
        families = list(dict.fromkeys(c.FAMILY for c in space.configs))
        if self.policy is None or any(f not in self.policy.families for f in families):
            return families
        import torch

        with torch.no_grad():
            logits = self.policy.logits(problem)
        return sorted(families, key=lambda f: -float(logits[self.policy.families.index(f)]))

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        return None

    def learn_cublaslt_kernels(self, problem: Problem, kernels: Mapping[str, Any]) -> None:
        """What a GPU step measured cuBLASLt running on ``problem`` goes first, in place of a
        nearby problem's recorded kernels."""
        if problem.key in self.borrowed:
            self.borrowed.discard(problem.key)
            self.mirror.targets.pop(problem.key, None)
        self.mirror.learn_cublaslt_kernels(problem, kernels)


def measured_families(history: Iterable[CandidateRecord]) -> set[str]:
    return {r.family for r in history if r.status == CandidateStatus.OK}


def unreached_families(space: SearchSpace, history: Sequence[CandidateRecord]) -> list[str]:
    """The space's families not yet measured on the shape and not failed FLOOR_TRIES times."""
    measured = measured_families(history)
    failures: dict[str, int] = {}
    for record in history:
        if record.status != CandidateStatus.OK:
            failures[record.family] = failures.get(record.family, 0) + 1
    families = dict.fromkeys(c.FAMILY for c in space.configs)
    return [f for f in families if f not in measured and failures.get(f, 0) < FLOOR_TRIES]


def with_family_floor(
    batch: Sequence[Proposal],
    problem: Problem,
    space: SearchSpace,
    n: int,
    *,
    history: Sequence[CandidateRecord],
    exclude: set[str],
    rng: random.Random,
    seed: SeedProposer,
    floor: int = FAMILY_FLOOR,
) -> list[Proposal]:
    """``batch`` with at least ``floor`` candidates of each family not yet reached on the shape
    (:func:`unreached_families`), the seed's picks for it taking the place of the batch's last
    proposals of families that have more than ``floor``, or filling the batch up to ``n``."""
    out = list(batch)
    unreached = unreached_families(space, history)
    if floor <= 0 or not unreached:
        return out
    taken = set(exclude) | {p.config.name for p in out}
    for family in unreached:
        want = floor - sum(family == p.config.FAMILY for p in out)
        if want <= 0:
            continue
        picks = seed.family_picks(problem, space, family, want, exclude=taken, rng=rng)
        for pick in picks:
            if len(out) < n:
                out.append(pick)
            else:
                victim = _last_spare(out, unreached, floor)
                if victim is None:
                    return out
                out[victim] = pick
            taken.add(pick.config.name)
    return out


def _last_spare(batch: Sequence[Proposal], unreached: Sequence[str], floor: int) -> int | None:
    """The last proposal of the family with the most to spare: an unreached family keeps
    ``floor`` candidates, the others may give up all of theirs."""
    spare: dict[str, int] = {}
    for p in batch:
        spare[p.config.FAMILY] = spare.get(p.config.FAMILY, 0) + 1
    for family in unreached:
        if family in spare:
            spare[family] -= floor
    family, most = max(spare.items(), key=lambda item: item[1], default=("", 0))
    if most <= 0:
        return None
    return max(i for i, p in enumerate(batch) if family == p.config.FAMILY)
