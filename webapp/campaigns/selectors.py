"""Reads for campaigns."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    TextField,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from engine.stats import quantile
from engine.timing.ratios import REWARD_BASELINE
from webapp.campaigns import live, ratios
from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.campaigns.times import campaign_times, times_display
from webapp.workers.models import GpuEnvironment
from webapp.workers.selectors import Heartbeats

BASELINES = [b.value for b in BaselineResult.Baseline]
BASELINE_LABELS = dict(BaselineResult.Baseline.choices)
# Tables and legends list the reward baseline first, then the rest in the engine's order.
BASELINE_ORDER = [REWARD_BASELINE, *(b for b in BASELINES if b != REWARD_BASELINE)]
# One colour per baseline, the same on every chart and in the table's headers.
BASELINE_COLOURS = {
    "cublaslt_autotune": "#2f5bd3",
    "cublaslt_heuristic": "#0e9aa7",
    "cublas": "#7c3aed",
    "torch": "#475569",
    "inductor_max_autotune": "#d97706",
    "tunableop": "#db2777",
}
CANDIDATE_SORTS = {
    # the speedup every page shows (webapp.campaigns.ratios); reward is the search's own signal
    "speedup": (F("speedup").desc(nulls_last=True), F("reward").desc(nulls_last=True), "id"),
    "reward": (F("reward").desc(nulls_last=True), "id"),
    "time": (F("median_s").asc(nulls_last=True), "id"),
    "name": ("name", "id"),
}


def campaign_list() -> QuerySet[Campaign]:
    """Newest first; per row: shape counts and candidate count (the headline of a page of
    campaigns comes from webapp.campaigns.ratios.campaign_headlines, one more query)."""
    candidate_count = (
        Candidate.objects.filter(problem__campaign=OuterRef("pk"))
        .order_by()
        .values("problem__campaign")
        .annotate(c=Count("id"))
        .values("c")
    )
    return (
        Campaign.objects.select_related("owner")
        .annotate(
            problem_count=Count("problems", distinct=True),
            problems_done=Count(
                "problems", filter=Q(problems__status=Problem.Status.DONE), distinct=True
            ),
            candidate_count=Subquery(candidate_count),
        )
        .order_by("-created", "-id")
    )


def campaign_shapes(*, campaign: Campaign) -> list[dict[str, Any]]:
    """The campaign's shapes in the leaderboard's order as plain rows: ``SHAPE_FIELDS`` (``best``:
    the chosen, timed kernel), ``status`` and ``candidate_count``. Plain rows, not models: at
    1000 shapes, building Problem instances and decoding the JSON fields no page reads cost
    more than the rest of the page."""
    return list(
        campaign.problems.annotate(candidate_count=Count("candidates"))
        .order_by("k", "m", "n", "layout")
        .values(*SHAPE_FIELDS, "status", "candidate_count")
    )


@dataclass(frozen=True)
class ShapeLine:
    """One row of the campaign page's shape table."""

    id: int
    shape: str
    layout: str
    status_label: str
    candidate_count: int
    row: dict[str, Any]  # shape_row's record
    cells: list[tuple[str, float | None, str | None]]  # (baseline, ratio, verdict) per column
    waiting: str = ""
    eta_s: float | None = None


def shape_lines(
    shapes: Iterable[dict[str, Any]],
    rows: Iterable[dict[str, Any]],
    *,
    shown: Sequence[str],
    waits: Mapping[int, str],
    etas: Mapping[int, float],
) -> list[ShapeLine]:
    """``campaign_shapes``' rows, with their ``shape_row`` records, as the shape table shows
    them: a column per ``shown`` baseline."""
    labels = dict(Problem.Status.choices)
    lines = []
    for p, row in zip(shapes, rows, strict=True):
        lines.append(
            ShapeLine(
                id=p["id"],
                shape=row["shape"],
                layout=p["layout"],
                status_label=labels.get(p["status"], p["status"]),
                candidate_count=p["candidate_count"],
                row=row,
                cells=[(b, row["speedups"][b], row["verdicts"][b]) for b in shown],
                waiting=waits.get(p["id"], ""),
                eta_s=etas.get(p["id"]),
            )
        )
    return lines


def campaign_proposers(*, campaign: Campaign) -> dict[str, Any]:
    """What actually proposed its candidates (count per proposer) and how many search rounds
    ran: the recorded facts, whatever mix the settings asked for."""
    rows = (
        Candidate.objects.filter(problem__campaign=campaign)
        .order_by()
        .values("proposer")
        .annotate(
            n=Count("id"), last_round=Max(Cast(KeyTextTransform("round", "outcome"), FloatField()))
        )
    )
    counts = sorted(((r["proposer"], r["n"]) for r in rows), key=lambda pair: -pair[1])
    rounds = [r["last_round"] for r in rows if r["last_round"] is not None]
    return {"counts": counts, "rounds": int(max(rounds)) + 1 if rounds else None}


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
    sort: str = "speedup",
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
    return qs.order_by(*CANDIDATE_SORTS.get(sort, CANDIDATE_SORTS["speedup"]))


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


def shape_row(p: dict[str, Any]) -> dict[str, Any]:
    """One shape as the charts and the leaderboard read it: its chosen kernel's same-session
    ratios (value, interval, verdict), time and TFLOP/s; no ratio where none was paired."""
    best = p.get("best") or {}
    ratios = best.get("ratios") or {}
    return {
        "problem": p["id"],
        "shape": f"{p['m']}x{p['n']}x{p['k']}",
        "m": p["m"],
        "n": p["n"],
        "k": p["k"],
        "layout": p["layout"],
        "candidate": best.get("candidate"),
        "kernel": best.get("name"),
        "session": (best.get("session") or {}).get("name"),
        "seconds": best.get("seconds"),
        "tflops": best.get("tflops"),
        "speedups": {b: (ratios.get(b) or {}).get("value") for b in BASELINES},
        "verdicts": {b: (ratios.get(b) or {}).get("verdict") for b in BASELINES},
        "intervals": {
            b: [(ratios.get(b) or {}).get("low"), (ratios.get(b) or {}).get("high")]
            for b in BASELINES
        },
    }


SHAPE_FIELDS = ("id", "m", "n", "k", "layout", "best")


def shown_baselines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The baselines a table or legend shows, reward baseline first: those any shape has a
    ratio over (a baseline never timed for these shapes is left out, not shown as "—"); with
    no ratio yet, the reward baseline alone (every GPU step times it)."""
    timed = {b for row in rows for b, value in row["speedups"].items() if value is not None}
    return [b for b in BASELINE_ORDER if b in timed] or [REWARD_BASELINE]


def baseline_legend(keys: Iterable[str]) -> list[dict[str, str]]:
    return [{"key": b, "label": BASELINE_LABELS[b], "colour": BASELINE_COLOURS[b]} for b in keys]


def campaign_speedups_data(*, campaign: Campaign) -> dict[str, Any]:
    """The leaderboard and the speedup chart: each shape's chosen kernel over each baseline."""
    problems = (
        Problem.objects.filter(campaign=campaign)
        .order_by("k", "m", "n", "layout")
        .values(*SHAPE_FIELDS)
    )
    rows = [shape_row(p) for p in problems]
    return {
        "campaign": campaign.id,
        "protocol": ratios.HEADLINE_PROTOCOL,
        # those with a ratio for some shape, reward baseline first, each with its colour
        "baselines": baseline_legend(shown_baselines(rows)),
        "shapes": rows,
    }


def most_common_k(ks: list[int]) -> int | None:
    """The heatmap's default K (the page's and the API's): the K most shapes have, the
    smallest of those on a tie; None without shapes."""
    return max(sorted(set(ks)), key=ks.count) if ks else None


def campaign_heatmap_data(
    *, campaign: Campaign, k: int | None, baseline: str, layout: str | None
) -> dict[str, Any]:
    """The chosen kernel's speedup over ``baseline`` for every (M, N) at one K (default: the
    most common K)."""
    shapes = list(campaign.problems.order_by("m", "n").values(*SHAPE_FIELDS))
    ks = sorted({s["k"] for s in shapes})
    layouts = sorted({s["layout"] for s in shapes})
    if k not in ks:
        k = most_common_k([s["k"] for s in shapes])
    if layout not in layouts:
        layout = layouts[0] if layouts else None
    cells = [shape_row(s) for s in shapes if s["k"] == k and s["layout"] == layout]
    return {
        "campaign": campaign.id,
        "k": k,
        "ks": ks,
        "layout": layout,
        "layouts": layouts,
        "baseline": baseline,
        "baseline_label": BASELINE_LABELS.get(baseline, baseline),
        "cells": [
            {
                "problem": c["problem"],
                "m": c["m"],
                "n": c["n"],
                "speedup": c["speedups"].get(baseline),
                "verdict": c["verdicts"].get(baseline),
            }
            for c in cells
        ],
    }


def history_points(rows: Iterable[tuple[Any, str, float | None, Any]]) -> list[dict[str, Any]]:
    """Candidates in the order they were made: each one's speedup over the reward baseline in
    its own session (Candidate.speedup: null for a failure or an unpaired time, never a penalty
    reward), the best so far, and the cumulative GPU seconds spent."""
    points, best, gpu = [], None, 0.0
    for cid, status, value, gpu_seconds in rows:
        gpu += float(gpu_seconds or 0.0)
        if value is not None and (best is None or value > best):
            best = value
        points.append(
            {"candidate": cid, "status": status, "speedup": value, "best": best, "gpu_s": gpu}
        )
    return points


def problem_history_data(*, problem: Problem) -> dict[str, Any]:
    """The shape's optimisation history (best so far against candidates and GPU time)."""
    rows = (
        Candidate.objects.filter(problem=problem)
        .order_by("created", "id")
        .values_list("id", "status", "speedup", "outcome__gpu_seconds")
    )
    return {
        "problem": problem.id,
        "baseline": REWARD_BASELINE,
        "baseline_label": BASELINE_LABELS[REWARD_BASELINE],
        "baseline_colour": BASELINE_COLOURS[REWARD_BASELINE],
        "points": thin([{"index": i + 1, **p} for i, p in enumerate(history_points(rows))]),
    }


def campaign_history_data(*, campaign: Campaign) -> dict[str, Any]:
    """Campaign-wide history: after each candidate (in the order made), the geomean over the
    shapes timed so far of each one's best same-session speedup over the reward baseline, and
    how many shapes are faster."""
    rows = (
        Candidate.objects.filter(problem__campaign=campaign)
        .order_by("created", "id")
        .values_list("problem_id", "speedup", "outcome__gpu_seconds")
    )
    best: dict[int, float] = {}
    log_sum, gpu, faster, points = 0.0, 0.0, 0, []
    for index, (problem_id, value, gpu_seconds) in enumerate(rows.iterator(chunk_size=2000)):
        gpu += float(gpu_seconds or 0.0)
        earlier = best.get(problem_id)
        if value is not None and (earlier is None or value > earlier):
            log_sum += math.log(value) - (math.log(earlier) if earlier else 0.0)
            faster += (value > 1) - (earlier is not None and earlier > 1)
            best[problem_id] = value
        points.append(
            {
                "index": index + 1,
                "geomean": math.exp(log_sum / len(best)) if best else None,
                "shapes": len(best),
                "faster": faster,
                "gpu_s": gpu,
            }
        )
    return {
        "campaign": campaign.id,
        "baseline": REWARD_BASELINE,
        "baseline_label": BASELINE_LABELS[REWARD_BASELINE],
        "baseline_colour": BASELINE_COLOURS[REWARD_BASELINE],
        "points": thin(points),
    }


HISTORY_POINTS = 2000  # at most this many points reach the browser; the last always does


def thin(points: list[dict[str, Any]], most: int = HISTORY_POINTS) -> list[dict[str, Any]]:
    if len(points) <= most:
        return points
    step = len(points) / most
    picked = sorted({int(i * step) for i in range(most)} | {len(points) - 1})
    return [points[i] for i in picked]


def knob_data(*, campaign: Campaign, problem: Problem | None = None) -> dict[str, Any]:
    """Each verified candidate's same-session speedup over the reward baseline beside its knobs
    (tile, cluster, stages, schedule, split-K...), for the per-knob box plots."""
    qs = Candidate.objects.filter(problem__campaign=campaign, speedup__isnull=False)
    if problem is not None:
        qs = qs.filter(problem=problem)
    # one JSON parse per distinct config (a config is often tried on many shapes)
    by_config: dict[str, list[float]] = {}
    rows = qs.values_list(Cast("config", TextField()), "speedup")
    for text, value in rows.iterator(chunk_size=2000):
        by_config.setdefault(text or "{}", []).append(value)
    by_knob: dict[str, dict[str, list[float]]] = {}
    for text, values in by_config.items():
        config = json.loads(text)
        for knob, setting in config.items() if isinstance(config, dict) else ():
            if isinstance(setting, dict | list):
                setting = json.dumps(setting, sort_keys=True)
            by_knob.setdefault(knob, {}).setdefault(str(setting), []).extend(values)
    knobs = []
    for knob, groups in sorted(by_knob.items()):
        if len(groups) < 2:
            continue  # a knob that never varied says nothing
        knobs.append(
            {
                "knob": knob,
                "values": [
                    {"value": setting, **box(speedups)}
                    for setting, speedups in sorted(groups.items(), key=lambda kv: natural(kv[0]))
                ],
            }
        )
    return {
        "campaign": campaign.id,
        "problem": problem.id if problem else None,
        "baseline": REWARD_BASELINE,
        "baseline_label": BASELINE_LABELS[REWARD_BASELINE],
        "baseline_colour": BASELINE_COLOURS[REWARD_BASELINE],
        "knobs": knobs,
    }


def natural(text: str) -> tuple[Any, ...]:
    """Sort 64 before 128, and words by their letters."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def box(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": ordered[0],
        "q1": quantile(ordered, 0.25),
        "median": quantile(ordered, 0.5),
        "q3": quantile(ordered, 0.75),
        "max": ordered[-1],
    }


def campaign_progress_data(*, campaign: Campaign, heartbeats: Heartbeats) -> dict[str, Any]:
    """What the campaign page polls: status, counts, the headline, and per shape its chosen
    kernel's speedups and what its next step waits for."""
    problems = campaign_shapes(campaign=campaign)
    labels = dict(Problem.Status.choices)
    waiting = live.campaign_waits(campaign=campaign, heartbeats=heartbeats)
    etas = live.campaign_eta_seconds(campaign=campaign)
    gpu_wait = live.campaign_gpu_wait(campaign=campaign, heartbeats=heartbeats)
    h = ratios.headline_of((p["m"], p["n"], p["k"], p["layout"], p["best"]) for p in problems)
    times = campaign_times(campaign=campaign, now=timezone.now())
    return {
        "campaign": campaign.id,
        "status": campaign.status,
        "status_label": live.WAITING_LABEL if gpu_wait else campaign.get_status_display(),
        "gpu_wait": gpu_wait.to_dict() if gpu_wait else None,
        "shapes": len(problems),
        "shapes_done": sum(p["status"] == Problem.Status.DONE for p in problems),
        "candidates": sum(p["candidate_count"] for p in problems),
        "headline": h.to_dict(),
        "times": times.to_dict() if times else None,
        "times_display": times_display(times),
        "problems": [
            {
                **shape_row(p),
                "status": p["status"],
                "status_label": labels.get(p["status"], p["status"]),
                "candidates": p["candidate_count"],
                "waiting": waiting.get(p["id"], ""),
                "eta_gpu_s": etas.get(p["id"]),
            }
            for p in problems
        ],
    }
