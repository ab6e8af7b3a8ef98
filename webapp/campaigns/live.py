"""What each shape of a running campaign waits for, and when it may be done.

Read from the work items (the database is the source of truth for the distributed runner): a
shape's newest unfinished item says which step is next (a compile, a GPU step) and whether a
worker holds it; the workers' heartbeats say whether any worker serves that queue. The ETA is
the shape's remaining candidates at the GPU seconds per candidate this campaign has measured so
far; none before the first measurement (no number that was not measured).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, FloatField, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from webapp.campaigns.models import Campaign, Candidate, Problem, WorkItem, gpu_queue
from webapp.workers.selectors import Heartbeats

ACTIVE = (Campaign.Status.QUEUED, Campaign.Status.RUNNING)
WAITING_LABEL = "Waiting for a GPU worker"
# README, "Adding a GPU worker": one worker per GPU, on the GPU machine
WORKER_COMMAND = (
    "REDIS_URL=... DATABASE_URL=... GEMMFORGE_NAMESPACE=... SECRET_KEY=... "
    "GEMMFORGE_EXECUTOR=local GEMMFORGE_GPU_DEVICE=0 .venv/bin/celery -A webapp worker "
    "-Q {queue} -n gpu0@%h --concurrency 1 --prefetch-multiplier 1"
)


@dataclass(frozen=True)
class GpuWait:
    """An active campaign whose GPU steps no online worker can run."""

    queues: tuple[str, ...]  # the GPU queues it needs that no worker serves
    since: datetime  # when a worker last served them (the launch, when none ever did)

    @property
    def text(self) -> str:
        return f"waiting for a GPU worker (none online since {self.since:%Y-%m-%d %H:%M} UTC)"

    @property
    def commands(self) -> list[str]:
        return [WORKER_COMMAND.format(queue=queue) for queue in self.queues]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "queues": list(self.queues),
            "since": self.since.isoformat(),
            "commands": self.commands,
        }


def campaign_gpu_queues(*, campaigns: Sequence[Campaign]) -> dict[int, set[str]]:
    """Campaign id → the GPU queues its shapes' steps go to (webapp.campaigns.models.gpu_queue);
    one query whatever the number of campaigns."""
    pools = {campaign.id: campaign.gpu_pool for campaign in campaigns}
    queues: dict[int, set[str]] = {campaign_id: set() for campaign_id in pools}
    arches = (
        Problem.objects.filter(campaign_id__in=pools)
        .order_by()
        .values_list("campaign_id", "arch")
        .distinct()
    )
    for campaign_id, arch in arches:
        queues[campaign_id].add(gpu_queue(pool=pools[campaign_id], arch=arch))
    return queues


def campaign_gpu_waits(
    *, campaigns: Sequence[Campaign], heartbeats: Heartbeats
) -> dict[int, GpuWait]:
    """Campaign id → what it waits for, for the queued or running campaigns whose GPU steps no
    online worker can run (their compiles may still run); at most one query."""
    active = [campaign for campaign in campaigns if campaign.status in ACTIVE]
    if not active:
        return {}
    queues = campaign_gpu_queues(campaigns=active)
    waits: dict[int, GpuWait] = {}
    for campaign in active:
        missing = tuple(sorted(queues[campaign.id] - heartbeats.served))
        if missing:
            seen = [t for q in missing if (t := heartbeats.last_served(q)) is not None]
            waits[campaign.id] = GpuWait(missing, max(seen) if seen else campaign.created)
    return waits


def campaign_gpu_wait(*, campaign: Campaign, heartbeats: Heartbeats) -> GpuWait | None:
    """What the campaign waits for (campaign_gpu_waits), None when it waits for no worker."""
    return campaign_gpu_waits(campaigns=[campaign], heartbeats=heartbeats).get(campaign.id)


STEPS = {  # work item kind → (its step, what it does)
    WorkItem.Kind.COMPILE: ("compile", "nvcc"),
    WorkItem.Kind.GPU: ("GPU step", "verification and timing"),
    WorkItem.Kind.FINAL: ("finals", "compute-sanitizer and the final re-measurement"),
}


def wait_text(item: dict[str, Any], served: Collection[str]) -> str:
    """Which step is next and who it waits for."""
    step, what = STEPS[item["kind"]]
    if item["status"] == WorkItem.Status.RUNNING:
        return f"round {item['round']}: {step} running on {item['worker'] or 'a worker'} ({what})"
    if item["queue"] not in served:
        return f"round {item['round']}: {step} waits for a worker of {item['queue']} (none online)"
    return f"round {item['round']}: {step} queued on {item['queue']}"


def campaign_waits(*, campaign: Campaign, heartbeats: Heartbeats) -> dict[int, str]:
    """Problem id → what its next step waits for ("" when nothing is pending)."""
    if campaign.status not in ACTIVE:
        return {}
    items = (
        WorkItem.objects.filter(
            campaign=campaign, status__in=(WorkItem.Status.QUEUED, WorkItem.Status.RUNNING)
        )
        .order_by("problem_id", "-round", "-id")
        .values("problem_id", "kind", "round", "status", "queue", "worker")
    )
    waits: dict[int, str] = {}
    for item in items:
        waits.setdefault(item["problem_id"], wait_text(item, heartbeats.served))
    return waits


def campaign_eta_seconds(*, campaign: Campaign) -> dict[int, float]:
    """Problem id → GPU seconds left at the campaign's measured GPU seconds per candidate, for
    the shapes still running; {} before any candidate was measured."""
    if campaign.status not in ACTIVE:
        return {}
    measured = Candidate.objects.filter(
        problem__campaign=campaign, outcome__gpu_seconds__gt=0
    ).aggregate(per=Avg(Cast(KeyTextTransform("gpu_seconds", "outcome"), FloatField())))["per"]
    if not measured:
        return {}
    rows = (
        Problem.objects.filter(campaign=campaign)
        .exclude(status__in=(Problem.Status.DONE, Problem.Status.FAILED))
        .annotate(made=Count("candidates", filter=Q(candidates__outcome__isnull=False)))
        .values_list("id", "made")
    )
    budget = campaign.budget_per_shape
    return {pid: max(0, budget - made) * float(measured) for pid, made in rows}
