"""What the user of a campaign waited for: wall time, GPU busy, the first verified kernel, the
finals, candidates per wall-hour. Read from a worker-run campaign's work items (each GPU and
finals step records its own wall time, ``step_s``), or from an imported engine run's report
(``Campaign.engine_times``: engine.commands.optimize_command's felt_times)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, FloatField, Max, Min, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from webapp.campaigns import launch, live
from webapp.campaigns.models import Campaign, WorkItem


@dataclass(frozen=True)
class CampaignTimes:
    """What the user of a campaign felt: seconds from its first step (or its engine command's
    start), the GPU steps' time, and how many candidates were measured."""

    wall_s: float  # to the last step's end, or to now while the campaign is active
    gpu_busy_s: float  # the GPU and finals steps' wall time, summed over every GPU
    gpu_workers: int  # the workers that ran them (GPU steps of a pool run side by side)
    candidates: int
    first_verified_s: float | None  # the end of the first GPU step that verified a kernel
    finals_done_s: float | None  # the end of the last finals step, once the campaign is done
    engine_run: bool = False  # from an imported engine run's report: its last command's times

    @property
    def gpu_busy_fraction(self) -> float | None:
        """Of the wall time, per GPU worker."""
        return self.gpu_busy_s / (self.wall_s * max(1, self.gpu_workers)) if self.wall_s else None

    @property
    def candidates_per_wall_hour(self) -> float | None:
        return self.candidates / self.wall_s * 3600 if self.wall_s else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_seconds": round(self.wall_s, 3),
            "gpu_busy_seconds": round(self.gpu_busy_s, 3),
            "gpu_workers": self.gpu_workers,
            "gpu_busy_fraction": _rounded(self.gpu_busy_fraction, 4),
            "first_verified_seconds": _rounded(self.first_verified_s, 3),
            "finals_done_seconds": _rounded(self.finals_done_s, 3),
            "candidates": self.candidates,
            "candidates_per_wall_hour": _rounded(self.candidates_per_wall_hour, 1),
            "source": "engine run" if self.engine_run else "work items",
        }


def engine_times_of(throughput: Mapping[str, Any]) -> CampaignTimes | None:
    """An engine run's times (its report's throughput, engine.commands.optimize_command's
    felt_times) as the page shows a worker-run campaign's: from the command's start, the GPU busy
    in the search and the whole finals (they hold the GPU throughout), one GPU."""
    wall = throughput.get("wall_seconds")
    if not isinstance(wall, int | float):  # an interrupted run wrote no whole wall time
        return None
    finals = throughput.get("final_seconds")
    return CampaignTimes(
        wall_s=float(wall),
        gpu_busy_s=float(throughput.get("gpu_busy_seconds") or 0.0) + float(finals or 0.0),
        gpu_workers=1,
        candidates=int(throughput.get("candidates") or 0),
        first_verified_s=throughput.get("first_verified_seconds"),
        finals_done_s=throughput.get("to_final_seconds") if finals is not None else None,
        engine_run=True,
    )


def times_display(times: CampaignTimes | None) -> dict[str, str] | None:
    """The campaign page's times line, each part as it is shown (the page and progress.json,
    which the page's script applies, share these strings)."""
    if times is None:
        return None
    fraction, rate = times.gpu_busy_fraction, times.candidates_per_wall_hour
    return {
        "wall": launch.duration_text(times.wall_s),
        "since": "in its last engine optimize run" if times.engine_run else "since its first step",
        "busy": "—" if fraction is None else f"{fraction:.0%}",
        "busy_s": launch.duration_text(times.gpu_busy_s),
        "workers": f" on {times.gpu_workers} GPU workers" if times.gpu_workers > 1 else "",
        "first": "—"
        if times.first_verified_s is None
        else launch.duration_text(times.first_verified_s),
        "finals": ""
        if times.finals_done_s is None
        else f" · finals done after {launch.duration_text(times.finals_done_s)}",
        "candidates": str(times.candidates),
        "rate": "—" if rate is None else f"{rate:.0f}",
    }


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def campaign_times(*, campaign: Campaign, now: datetime) -> CampaignTimes | None:
    """The campaign's times from its work items (one query); for one imported from an engine
    run, that run's (``engine_times_of``); None for a campaign nothing ran yet."""
    gpu_kinds = (WorkItem.Kind.GPU, WorkItem.Kind.FINAL)
    done = Q(status=WorkItem.Status.DONE)
    row = WorkItem.objects.filter(campaign=campaign).aggregate(
        started=Min("created"),
        last=Max("updated"),
        gpu_busy=Sum(
            Cast(KeyTextTransform("step_s", "result"), FloatField()),
            filter=done & Q(kind__in=gpu_kinds),
        ),
        gpu_workers=Count("worker", distinct=True, filter=done & Q(kind__in=gpu_kinds)),
        candidates=Sum(
            Cast(KeyTextTransform("measured", "result"), FloatField()),
            filter=done & Q(kind=WorkItem.Kind.GPU),
        ),
        first_verified=Min("updated", filter=done & Q(kind=WorkItem.Kind.GPU, result__ok__gt=0)),
        finals_done=Max("updated", filter=done & Q(kind=WorkItem.Kind.FINAL)),
    )
    started = row["started"]
    if started is None:
        return engine_times_of(campaign.engine_times)
    end = now if campaign.status in live.ACTIVE else row["last"]

    def since(moment: datetime | None) -> float | None:
        return None if moment is None else max(0.0, (moment - started).total_seconds())

    return CampaignTimes(
        wall_s=since(end) or 0.0,
        gpu_busy_s=float(row["gpu_busy"] or 0.0),
        gpu_workers=int(row["gpu_workers"] or 0),
        candidates=int(row["candidates"] or 0),
        first_verified_s=since(row["first_verified"]),
        finals_done_s=since(row["finals_done"])
        if campaign.status == Campaign.Status.DONE
        else None,
    )
