"""A campaign's results as CSV rows and as one JSON document (for downloads)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.utils import timezone
from django.utils.text import slugify

from webapp.campaigns import ratios
from webapp.campaigns.models import Campaign, Candidate
from webapp.campaigns.selectors import BASELINES, campaign_environments
from webapp.campaigns.times import campaign_times

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
    "session",
    "session_kernel_s",
    "chosen",
    *[f"speedup_{b}" for b in BASELINES],
    *[f"verdict_{b}" for b in BASELINES],
]


def download_name(*, campaign: Campaign, extension: str) -> str:
    """e.g. gemmforge-campaign-12-llama-mlp-results.csv (ASCII only, so any browser keeps it)."""
    slug = slugify(campaign.name)[:60].strip("-") or "campaign"
    return f"gemmforge-campaign-{campaign.id}-{slug}-results.{extension}"


def result_rows(*, campaign: Campaign) -> Iterator[dict[str, Any]]:
    """One dict per candidate, shapes in order, best reward first. ``median_s`` is the search's
    time; the speedups are the ratios of ``session`` (webapp.campaigns.ratios): that session's
    baselines over that session's kernel time, blank where no session paired them."""
    protocol = campaign.reward_protocol
    chosen = {
        best.get("candidate")
        for best in campaign.problems.values_list("best", flat=True)
        if best and best.get("candidate") is not None
    }
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
    gpus = ratios.gpu_names()
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
        session, found = ratios.shown_ratios(timings or {}, protocol, gpus)
        if status != Candidate.Status.DONE:
            found = {}  # a time that failed a check is no result to compare
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
            "median_s": ((timings or {}).get(protocol) or {}).get("median_s"),
            "reward": reward,
            "session": session.name if session else None,
            "session_kernel_s": session.kernel.seconds if session else None,
            "chosen": cid in chosen,
            **{f"speedup_{b}": found[b].value if b in found else None for b in BASELINES},
            **{f"verdict_{b}": found[b].verdict if b in found else None for b in BASELINES},
        }


def campaign_document(*, campaign: Campaign) -> dict[str, Any]:
    """The JSON download: the campaign, its headline and environments, shapes with their chosen
    kernel (its session's times and ratios), and every candidate."""
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
        "headline": ratios.campaign_headline(campaign=campaign).to_dict(),
        # what its user felt (wall time, GPU busy, …); null for a campaign no worker ran
        "times": times.to_dict()
        if (times := campaign_times(campaign=campaign, now=timezone.now()))
        else None,
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
                "best": p.best,
            }
            for p in campaign.problems.order_by("k", "m", "n", "layout")
        ],
        "candidates": list(result_rows(campaign=campaign)),
    }
