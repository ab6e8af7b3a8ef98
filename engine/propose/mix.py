"""A campaign's proposers from its mix: names a user may give and the proposers they make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.outcomes import CandidateRecord
from engine.problem import Problem
from engine.propose.mirror import MirrorProposer
from engine.propose.policy import Policy
from engine.propose.proposers import (
    EvolveProposer,
    PolicyProposer,
    Proposer,
    RandomProposer,
    TransferProposer,
)
from engine.propose.seed import SeedProposer

PROPOSER_NAMES = ("seed", "rl", "evolve", "random", "transfer")
# The mix of `engine optimize` and of the dashboard's campaigns: each family's prior picks in a
# shape's first round, the learned policy, evolution of what was measured, and a little uniform
# exploration. A share a proposer cannot fill goes to the next one listed: evolve's in the first
# round (nothing measured yet) to the seed, the seed's after it to the policy.
DEFAULT_MIX = {"evolve": 0.2, "seed": 0.25, "rl": 0.4, "random": 0.15}
# Proposers that need inputs a campaign launched from the dashboard does not have (the CLI's).
INPUT_PROPOSER_NAMES = ("mirror",)


def make_proposers(
    mix: Mapping[str, float],
    *,
    policy: Policy | None = None,
    known: Sequence[tuple[Problem, CandidateRecord]] = (),
    mirror_targets: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Proposer]:
    """The proposers a mix names ("rl" needs ``policy``; "transfer" starts from ``known``
    results of other problems; "mirror" from ``mirror_targets``, cuBLASLt's kernels per
    problem, engine.propose.mirror.load_targets; "seed" ranks its picks by ``policy`` where
    given and copies cuBLASLt's kernels from ``mirror_targets`` where known)."""
    out: dict[str, Proposer] = {}
    for name in mix:
        if name == "seed":
            out[name] = SeedProposer(mirror_targets, policy=policy)
        elif name == "random":
            out[name] = RandomProposer()
        elif name == "evolve":
            out[name] = EvolveProposer()
        elif name == "transfer":
            out[name] = TransferProposer(known)
        elif name == "mirror":
            if mirror_targets is None:
                raise ValueError(
                    "the mirror proposer needs cuBLASLt's kernels (--cublaslt-kernels)"
                )
            out[name] = MirrorProposer(mirror_targets)
        elif name == "rl":
            if policy is None:
                raise ValueError("the rl proposer needs a policy")
            out[name] = PolicyProposer(policy)
        else:
            expected = (*PROPOSER_NAMES, *INPUT_PROPOSER_NAMES)
            raise ValueError(f"unknown proposer {name!r}: expected one of {expected}")
    return out
