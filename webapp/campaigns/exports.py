"""A campaign's results as CSV rows and as one JSON document (for downloads)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.utils.text import slugify

from webapp.campaigns.models import BaselineResult, Campaign, Candidate
from webapp.campaigns.selectors import BASELINES, campaign_environments, speedups

CSV_HEADER = [
    "campaign_id",
    "shape",
    "m",
    "n",
    "k",
    "layout",
    "candidate_id",
    "candidate",
    "family",
    "proposer",
    "status",
    "protocol",
    "median_s",
    "reward",
    *[f"speedup_{b}" for b in BASELINES],
]


def download_name(*, campaign: Campaign, extension: str) -> str:
    """e.g. gemmforge-campaign-12-llama-mlp-results.csv (ASCII only, so any browser keeps it)."""
    slug = slugify(campaign.name)[:60].strip("-") or "campaign"
    return f"gemmforge-campaign-{campaign.id}-{slug}-results.{extension}"


def baseline_table(*, campaign: Campaign) -> dict[tuple[int, int, int, str], dict[str, float]]:
    """(m, n, k, layout) → baseline → fastest median in the reward protocol, in one query."""
    protocol = campaign.reward_protocol
    shapes = set(campaign.problems.values_list("m", "n", "k", "layout"))
    table: dict[tuple[int, int, int, str], dict[str, float]] = {}
    rows = BaselineResult.objects.filter(
        gpu_environment__in=campaign_environments(campaign=campaign)
    ).values_list("m", "n", "k", "layout", "baseline", "timings")
    for m, n, k, layout, baseline, timings in rows:
        key = (m, n, k, layout)
        median = (timings.get(protocol) or {}).get("median_s")
        if key in shapes and median:
            best = table.setdefault(key, {})
            best[baseline] = min(best.get(baseline, median), median)
    return table


def result_rows(*, campaign: Campaign) -> Iterator[dict[str, Any]]:
    """One dict per candidate, shapes in order, best reward first."""
    protocol = campaign.reward_protocol
    baselines = baseline_table(campaign=campaign)
    candidates = (
        Candidate.objects.filter(problem__campaign=campaign)
        .order_by("problem__k", "problem__m", "problem__n", "problem__layout", "-reward", "id")
        .values_list(
            "problem__m",
            "problem__n",
            "problem__k",
            "problem__layout",
            "id",
            "name",
            "family",
            "proposer",
            "status",
            "reward",
            "timings",
        )
    )
    for (
        m,
        n,
        k,
        layout,
        cid,
        name,
        family,
        proposer,
        status,
        reward,
        timings,
    ) in candidates.iterator(chunk_size=2000):
        median = (timings.get(protocol) or {}).get("median_s")
        ratios = speedups(seconds=median, baselines=baselines.get((m, n, k, layout), {}))
        yield {
            "campaign_id": campaign.id,
            "shape": f"{m}x{n}x{k}",
            "m": m,
            "n": n,
            "k": k,
            "layout": layout,
            "candidate_id": cid,
            "candidate": name,
            "family": family,
            "proposer": proposer,
            "status": status,
            "protocol": protocol,
            "median_s": median,
            "reward": reward,
            **{f"speedup_{b}": ratios.get(b) for b in BASELINES},
        }


def campaign_document(*, campaign: Campaign) -> dict[str, Any]:
    """The JSON download: the campaign, its environments, shapes with baselines, candidates."""
    baselines = baseline_table(campaign=campaign)
    return {
        "campaign": {
            "id": campaign.id,
            "name": campaign.name,
            "owner": campaign.owner.get_username(),
            "status": campaign.status,
            "layout": campaign.layout,
            "reward_protocol": campaign.reward_protocol,
            "created": campaign.created.isoformat(),
        },
        "environments": [
            {
                "name": e.name,
                "arch": e.arch,
                "driver": e.driver_version,
                "cuda": e.cuda_version,
                "cublas": e.cublas_version,
                "cutlass": e.cutlass_version,
                "clocks": e.clocks,
            }
            for e in campaign_environments(campaign=campaign)
        ],
        "shapes": [
            {
                "shape": p.shape,
                "m": p.m,
                "n": p.n,
                "k": p.k,
                "layout": p.layout,
                "status": p.status,
                "best_speedups": p.best_speedups,
                "baseline_seconds": baselines.get((p.m, p.n, p.k, p.layout), {}),
            }
            for p in campaign.problems.order_by("k", "m", "n", "layout")
        ],
        "candidates": list(result_rows(campaign=campaign)),
    }
