"""Reads for campaigns."""

from __future__ import annotations

from typing import Any

from django.db.models import (
    Count,
    Exists,
    F,
    FloatField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.workers.models import GpuEnvironment

BASELINES = [b.value for b in BaselineResult.Baseline]
BASELINE_LABELS = dict(BaselineResult.Baseline.choices)
CANDIDATE_SORTS = {
    "reward": (F("reward").desc(nulls_last=True), "id"),
    "time": (F("median_s").asc(nulls_last=True), "id"),
    "name": ("name", "id"),
}


def best_speedup_field(baseline: str) -> str:
    return f"best_{baseline}"


def campaign_list() -> QuerySet[Campaign]:
    """Newest first; per row: shape counts, candidate count and best speedup per baseline.

    One query for the page: the per-baseline bests are Max() over the problems' JSON
    best_speedups, the candidate count a correlated subquery.
    """
    candidate_count = (
        Candidate.objects.filter(problem__campaign=OuterRef("pk"))
        .order_by()
        .values("problem__campaign")
        .annotate(c=Count("id"))
        .values("c")
    )
    bests = {
        best_speedup_field(b): Max(
            Cast(KeyTextTransform(b, "problems__best_speedups"), FloatField())
        )
        for b in BASELINES
    }
    return (
        Campaign.objects.select_related("owner")
        .annotate(
            problem_count=Count("problems", distinct=True),
            problems_done=Count(
                "problems", filter=Q(problems__status=Problem.Status.DONE), distinct=True
            ),
            candidate_count=Subquery(candidate_count),
            **bests,
        )
        .order_by("-created", "-id")
    )


def campaign_problems(*, campaign: Campaign) -> QuerySet[Problem]:
    """The campaign's shapes with their candidate counts and best candidate's name."""
    best = candidates_best_first(problem_id=OuterRef("pk"))
    return campaign.problems.annotate(
        candidate_count=Count("candidates"),
        best_candidate_id=Subquery(best.values("id")[:1]),
        best_candidate_name=Subquery(best.values("name")[:1]),
    ).order_by("k", "m", "n", "layout")


def campaign_environments(*, campaign: Campaign) -> QuerySet[GpuEnvironment]:
    """GPU environments whose baselines were measured for this campaign's shapes."""
    shapes = Problem.objects.filter(
        campaign=campaign,
        m=OuterRef("m"),
        n=OuterRef("n"),
        k=OuterRef("k"),
        layout=OuterRef("layout"),
    )
    baselines = BaselineResult.objects.filter(Exists(shapes)).values("gpu_environment")
    return GpuEnvironment.objects.filter(id__in=baselines)


def candidates_best_first(
    *, problem: Problem | None = None, problem_id: Any = None
) -> QuerySet[Candidate]:
    """Highest reward first, unrewarded last (candidate_reward_idx covers problem, -reward)."""
    qs = Candidate.objects.filter(problem=problem) if problem else Candidate.objects.all()
    if problem_id is not None:
        qs = qs.filter(problem_id=problem_id)
    return qs.order_by(F("reward").desc(nulls_last=True), "id")


def candidate_table(
    *,
    problem: Problem,
    sort: str = "reward",
    status: str = "",
    proposer: str = "",
    family: str = "",
) -> QuerySet[Candidate]:
    """The shape page's candidates: filtered, sorted, with the reward protocol's median."""
    protocol = problem.campaign.reward_protocol
    qs = (
        Candidate.objects.filter(problem=problem)
        .defer("source", "compile_result", "verification_result", "config")
        .annotate(
            median_s=Cast(
                KeyTextTransform("median_s", KeyTextTransform(protocol, "timings")), FloatField()
            )
        )
    )
    if status:
        qs = qs.filter(status=status)
    if proposer:
        qs = qs.filter(proposer=proposer)
    if family:
        qs = qs.filter(family=family)
    return qs.order_by(*CANDIDATE_SORTS.get(sort, CANDIDATE_SORTS["reward"]))


def candidate_facets(*, problem: Problem) -> dict[str, list[str]]:
    """Distinct proposers and families of a shape's candidates (for the filter form)."""
    rows = (
        Candidate.objects.filter(problem=problem)
        .order_by()
        .values_list("proposer", "family")
        .distinct()
    )
    proposers, families = set(), set()
    for proposer, family in rows:
        proposers.add(proposer)
        families.add(family)
    return {"proposers": sorted(proposers), "families": sorted(families)}


def baseline_results(*, problem: Problem) -> QuerySet[BaselineResult]:
    return BaselineResult.objects.filter(
        m=problem.m, n=problem.n, k=problem.k, layout=problem.layout
    ).select_related("gpu_environment")


def baseline_best_seconds(*, problem: Problem, protocol: str) -> dict[str, float]:
    """Baseline → fastest median over its variants (and environments) in ``protocol``."""
    best: dict[str, float] = {}
    for row in baseline_results(problem=problem):
        median = (row.timings.get(protocol) or {}).get("median_s")
        if median:
            best[row.baseline] = min(best.get(row.baseline, median), median)
    return best


def baseline_best_kernels(*, problem: Problem, protocol: str) -> dict[str, str]:
    """Baseline → the kernel its fastest variant ran in ``protocol``, where a final
    re-measurement recorded it (cuBLASLt's algorithm: tile, cluster, stages, split-K)."""
    best: dict[str, tuple[float, str]] = {}
    for row in baseline_results(problem=problem):
        timing = row.timings.get(protocol) or {}
        median, kernel = timing.get("median_s"), timing.get("kernel")
        if median and kernel and median < best.get(row.baseline, (float("inf"), ""))[0]:
            best[row.baseline] = (median, kernel)
    return {baseline: kernel for baseline, (_, kernel) in best.items()}


def speedups(*, seconds: float | None, baselines: dict[str, float]) -> dict[str, float]:
    if not seconds:
        return {}
    return {b: baselines[b] / seconds for b in BASELINES if b in baselines}


def campaign_speedups_data(*, campaign: Campaign) -> dict[str, Any]:
    """The bar chart: each shape's best speedup over each baseline."""
    problems = (
        Problem.objects.filter(campaign=campaign)
        .order_by("k", "m", "n", "layout")
        .values("id", "m", "n", "k", "layout", "best_speedups")
    )
    return {
        "campaign": campaign.id,
        "baselines": [{"key": b, "label": BASELINE_LABELS[b]} for b in BASELINES],
        "shapes": [
            {
                "problem": p["id"],
                "shape": f"{p['m']}x{p['n']}x{p['k']}",
                "layout": p["layout"],
                "best_speedups": {b: (p["best_speedups"] or {}).get(b) for b in BASELINES},
            }
            for p in problems
        ],
    }


def campaign_heatmap_data(
    *, campaign: Campaign, k: int | None, baseline: str, layout: str | None
) -> dict[str, Any]:
    """Best speedup over ``baseline`` for every (M, N) at one K (default: the most common K)."""
    shapes = list(
        campaign.problems.order_by("m", "n").values("id", "m", "n", "k", "layout", "best_speedups")
    )
    ks = sorted({s["k"] for s in shapes})
    layouts = sorted({s["layout"] for s in shapes})
    if k not in ks:
        k = max(ks, key=lambda value: sum(s["k"] == value for s in shapes)) if ks else None
    if layout not in layouts:
        layout = layouts[0] if layouts else None
    return {
        "campaign": campaign.id,
        "k": k,
        "ks": ks,
        "layout": layout,
        "layouts": layouts,
        "baseline": baseline,
        "cells": [
            {
                "problem": s["id"],
                "m": s["m"],
                "n": s["n"],
                "speedup": (s["best_speedups"] or {}).get(baseline),
            }
            for s in shapes
            if s["k"] == k and s["layout"] == layout
        ],
    }


def problem_rewards_data(*, problem: Problem) -> dict[str, Any]:
    """Rewards in the order candidates were made, and the best so far (the reward curves)."""
    rewards = list(
        Candidate.objects.filter(problem=problem)
        .order_by("created", "id")
        .values_list("reward", flat=True)
    )
    best: list[float | None] = []
    current: float | None = None
    for reward in rewards:
        if reward is not None and (current is None or reward > current):
            current = reward
        best.append(current)
    return {"problem": problem.id, "rewards": rewards, "best_so_far": best}


def campaign_progress_data(*, campaign: Campaign) -> dict[str, Any]:
    """What the campaign page polls: status, counts and best speedups, overall and per shape."""
    problems = list(
        campaign.problems.annotate(candidate_count=Count("candidates"))
        .order_by("k", "m", "n", "layout")
        .values("id", "status", "candidate_count", "best_speedups")
    )
    labels = dict(Problem.Status.choices)
    overall: dict[str, float | None] = {}
    for b in BASELINES:
        values = [(p["best_speedups"] or {}).get(b) for p in problems]
        overall[b] = max((v for v in values if v is not None), default=None)
    return {
        "campaign": campaign.id,
        "status": campaign.status,
        "status_label": campaign.get_status_display(),
        "shapes": len(problems),
        "shapes_done": sum(p["status"] == Problem.Status.DONE for p in problems),
        "candidates": sum(p["candidate_count"] for p in problems),
        "best_speedups": overall,
        "problems": [
            {
                "problem": p["id"],
                "status": p["status"],
                "status_label": labels.get(p["status"], p["status"]),
                "candidates": p["candidate_count"],
                "best_speedups": {b: (p["best_speedups"] or {}).get(b) for b in BASELINES},
            }
            for p in problems
        ],
    }
