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

PROPOSER_NAMES = ("rl", "evolve", "random", "transfer")
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
    problem, engine.propose.mirror.load_targets)."""
    out: dict[str, Proposer] = {}
    for name in mix:
        if name == "random":
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
