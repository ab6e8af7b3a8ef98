"""A large campaign for load tests, made by resampling a recorded one.

Every timing in it is a copy of a measured one (drawn with replacement, per shape); only the
count is synthetic. Its name says so, and each candidate's timing names the record it copies.
"""

from __future__ import annotations

import random

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from webapp.campaigns.imports import name_hash
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.campaigns.ratios import problem_refresh_best

SYNTHETIC_PREFIX = "SYNTHETIC (load testing)"
RESAMPLE_PROPOSER = "resampled"


def synthetic_name(*, source: Campaign, candidates: int) -> str:
    return (
        f"{SYNTHETIC_PREFIX}: {candidates} candidates resampled from the recorded run"
        f" '{source.name}'"
    )


@transaction.atomic
def campaign_make_synthetic(
    *, source: Campaign, owner: AbstractBaseUser, candidates: int, seed: int = 2026
) -> Campaign:
    """A new DONE campaign with the source's shapes and ``candidates`` resampled candidates.

    Replaces an earlier synthetic campaign of the same name (so re-running does not pile up).
    """
    name = synthetic_name(source=source, candidates=candidates)
    Campaign.objects.filter(name=name, owner=owner).delete()
    campaign = Campaign.objects.create(
        name=name,
        owner=owner,
        status=Campaign.Status.DONE,
        layout=source.layout,
        budget_per_shape=max(1, -(-candidates // max(1, source.problems.count()))),
        proposer_mix={RESAMPLE_PROPOSER: 1.0},
        reward_protocol=source.reward_protocol,
    )
    pools: list[tuple[Problem, list[Candidate]]] = []
    for original in source.problems.order_by("id"):
        problem = Problem.objects.create(
            campaign=campaign,
            m=original.m,
            n=original.n,
            k=original.k,
            layout=original.layout,
            status=original.status,
        )
        recorded = list(original.candidates.order_by("id"))
        if recorded:
            pools.append((problem, recorded))
    if not pools:
        return campaign
    rng = random.Random(seed)
    batch: list[Candidate] = []
    for i in range(candidates):
        problem, recorded = pools[i % len(pools)]
        pick = rng.choice(recorded)
        name = f"{pick.name}~r{i}"
        timings = {
            protocol: {**record, "resampled_from": pick.id}
            for protocol, record in pick.timings.items()
        }
        batch.append(
            Candidate(
                problem=problem,
                name=name,
                family=pick.family,
                config=pick.config,
                source=pick.source,
                source_hash=name_hash(name),
                proposer=RESAMPLE_PROPOSER,
                compile_status=pick.compile_status,
                compile_result=pick.compile_result,
                verification_result=pick.verification_result,
                timings=timings,
                reward=pick.reward,
                status=pick.status,
                failure_reason=pick.failure_reason,
            )
        )
        if len(batch) >= 2000:
            Candidate.objects.bulk_create(batch)
            batch = []
    Candidate.objects.bulk_create(batch)
    for problem, _ in pools:
        problem_refresh_best(problem=problem)
    return campaign
