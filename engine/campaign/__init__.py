"""Campaigns without Django: propose → compile → verify → time → reward → learn.

space.py      the valid configs a campaign may propose for one problem
executor.py   GpuExecutor protocol; LocalGpuExecutor (this GPU) and ReplayExecutor (recorded)
storage.py    CampaignStorage protocol; SqliteStorage for the CLI
proposers.py  random, evolutionary, learned-policy and transfer proposers, mixed per campaign
mirror.py     the mirror proposer: our configs nearest to the kernels cuBLASLt runs
policy.py     the torch policy (REINFORCE, persisted per GPU arch, shared through a locked file)
round.py      one round: propose, compile, execute, records and rewards, learn (CLI and web)
loop.py       the CLI's rounds in one process: budgets, early stops, pipelined compiles, JSON
replay.py     the replay benchmark: every strategy against a recorded table, on the CPU
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.campaign.executor import (
    CompiledCandidate,
    GpuExecutor,
    LocalGpuExecutor,
    Outcome,
    ReplayExecutor,
    ReplayTable,
)
from engine.campaign.loop import (
    Campaign,
    CampaignSettings,
    ProblemResult,
    Progress,
    campaign_report,
    reward_of,
)
from engine.campaign.mirror import MirrorProposer
from engine.campaign.policy import InMemoryLearner, Policy, PolicyFile, policy_path
from engine.campaign.proposers import (
    EvolveProposer,
    PolicyProposer,
    Proposal,
    Proposer,
    RandomProposer,
    TransferProposer,
    propose_batch,
    split_batch,
)
from engine.campaign.round import Round, RoundSettings, batch_size_for
from engine.campaign.space import SearchSpace, families_for_arch
from engine.campaign.storage import CampaignStorage, CandidateRecord, SqliteStorage
from engine.problem import Problem

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
    problem, engine.campaign.mirror.load_targets)."""
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


__all__ = [
    "INPUT_PROPOSER_NAMES",
    "PROPOSER_NAMES",
    "Campaign",
    "CampaignSettings",
    "CampaignStorage",
    "CandidateRecord",
    "CompiledCandidate",
    "EvolveProposer",
    "GpuExecutor",
    "InMemoryLearner",
    "LocalGpuExecutor",
    "Outcome",
    "Policy",
    "PolicyFile",
    "PolicyProposer",
    "ProblemResult",
    "Progress",
    "Proposal",
    "Proposer",
    "RandomProposer",
    "ReplayExecutor",
    "ReplayTable",
    "Round",
    "RoundSettings",
    "SearchSpace",
    "SqliteStorage",
    "TransferProposer",
    "batch_size_for",
    "campaign_report",
    "families_for_arch",
    "make_proposers",
    "policy_path",
    "propose_batch",
    "reward_of",
    "split_batch",
]
