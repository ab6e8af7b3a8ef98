"""A large campaign for load tests, made by resampling a recorded one.

Every timing in it is a copy of a measured one (drawn with replacement, per shape); only the
count is synthetic. Its name says so, and each candidate's timing names the record it copies.
"""

from __future__ import annotations

import random

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from engine.timing import physics
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


def scaled_timings(timings: dict, factor: float) -> dict:
    """Every time of every session multiplied by ``factor``: kernel and baselines alike, so each
    same-session ratio is the recorded one."""

    def scale(entry: dict) -> dict:
        out = dict(entry)
        for key in ("median_s", "seconds", "p25", "p75"):
            if isinstance(out.get(key), int | float):
                out[key] = out[key] * factor
        if isinstance(out.get("baselines"), dict):
            out["baselines"] = {b: t * factor for b, t in out["baselines"].items()}
        if isinstance(out.get("final"), dict):
            out["final"] = scale(out["final"])
        return out

    return {protocol: scale(entry) for protocol, entry in timings.items()}


def floor_seconds(problem: Problem) -> float:
    return physics.floor_seconds(problem.as_engine(), physics.PEAKS["H200"])


def nearest(problems: list[Problem], m: int, n: int, k: int) -> Problem:
    """The recorded shape closest to (m, n, k) in log space."""
    import math

    def distance(p: Problem) -> float:
        return sum(math.log2(a / b) ** 2 for a, b in ((p.m, m), (p.n, n), (p.k, k)))

    return min(problems, key=distance)


@transaction.atomic
def campaign_make_synthetic_grid(
    *,
    source: Campaign,
    owner: AbstractBaseUser,
    shapes: list[tuple[int, int, int]],
    per_shape: int,
    seed: int = 2026,
) -> Campaign:
    """A DONE campaign over ``shapes`` (e.g. the CUDA-L2 preset's 1000): each shape takes
    ``per_shape`` candidates drawn from the recorded shape nearest to it, every time scaled by the
    ratio of the two shapes' roofline floors on an H200 (engine.timing.physics: FLOPs, bytes or the
    launch, whichever bounds it), so a 64³ shape is not credited with a time under the launch
    floor. Ratios are as recorded; the name says the campaign is synthetic."""
    name = (
        f"{SYNTHETIC_PREFIX}: {len(shapes)} shapes, {per_shape} candidates each,"
        f" drawn from '{source.name}'"
    )
    Campaign.objects.filter(name=name, owner=owner).delete()
    campaign = Campaign.objects.create(
        name=name,
        owner=owner,
        status=Campaign.Status.DONE,
        layout=source.layout,
        budget_per_shape=per_shape,
        proposer_mix={RESAMPLE_PROPOSER: 1.0},
        reward_protocol=source.reward_protocol,
    )
    recorded = [p for p in source.problems.order_by("id") if p.candidates.exists()]
    pools = {p.id: list(p.candidates.order_by("id")) for p in recorded}
    problems = Problem.objects.bulk_create(
        [
            Problem(campaign=campaign, m=m, n=n, k=k, layout=source.layout, status="done")
            for m, n, k in shapes
        ]
    )
    rng = random.Random(seed)
    batch: list[Candidate] = []
    for problem in problems:
        origin = nearest(recorded, problem.m, problem.n, problem.k)
        factor = floor_seconds(problem) / floor_seconds(origin)
        for i, pick in enumerate(rng.choices(pools[origin.id], k=per_shape)):
            name = f"{pick.name}~{problem.shape}~r{i}"
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
                    verification_result=pick.verification_result,
                    timings=scaled_timings(pick.timings or {}, factor),
                    outcome={
                        "gpu_seconds": (pick.outcome or {}).get("gpu_seconds", 0.0),
                        "resampled_from": pick.id,
                        "time_scale": factor,
                    },
                    reward=pick.reward,
                    status=pick.status,
                    failure_reason=pick.failure_reason,
                )
            )
        if len(batch) >= 2000:
            Candidate.objects.bulk_create(batch)
            batch = []
    Candidate.objects.bulk_create(batch)
    for problem in problems:
        problem_refresh_best(problem=problem)
    return campaign
