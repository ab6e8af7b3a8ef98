"""What each shape of a running campaign waits for, and when it may be done.

Read from the work items (the database is the source of truth for the distributed runner): a
shape's newest unfinished item says which step is next (a compile, a GPU step) and whether a
worker holds it; the workers' heartbeats say whether any worker serves that queue. The ETA is
the shape's remaining candidates at the GPU seconds per candidate this campaign has measured so
far; none before the first measurement (no number that was not measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, FloatField, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from webapp.campaigns.models import Campaign, Candidate, Problem, WorkItem, gpu_queue
from webapp.workers.selectors import queue_last_seen, workers_online

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


def campaign_gpu_queues(*, campaign: Campaign) -> set[str]:
    """The GPU queues its shapes' steps go to (webapp.campaigns.models.gpu_queue)."""
    arches = campaign.problems.order_by().values_list("arch", flat=True).distinct()
    return {gpu_queue(pool=campaign.gpu_pool, arch=arch) for arch in arches}


def campaign_gpu_wait(*, campaign: Campaign, served: set[str] | None = None) -> GpuWait | None:
    """None unless the campaign is queued or running and no online worker serves one of the GPU
    queues it needs (its compiles may still run: the GPU steps cannot)."""
    if campaign.status not in ACTIVE:
        return None
    served = served_queues() if served is None else served
    missing = tuple(sorted(campaign_gpu_queues(campaign=campaign) - served))
    if not missing:
        return None
    seen = [t for q in missing if (t := queue_last_seen(queue=q)) is not None]
    return GpuWait(missing, max(seen) if seen else campaign.created)


def served_queues() -> set[str]:
    queues: set[str] = set()
    for worker in workers_online():
        if worker.gpu_failed is None:
            queues.update(str(q) for q in worker.queues)
    return queues


STEPS = {  # work item kind → (its step, what it does)
    WorkItem.Kind.COMPILE: ("compile", "nvcc"),
    WorkItem.Kind.GPU: ("GPU step", "verification and timing"),
    WorkItem.Kind.FINAL: ("finals", "compute-sanitizer and the final re-measurement"),
}


def wait_text(item: dict[str, Any], served: set[str]) -> str:
    """Which step is next and who it waits for."""
    step, what = STEPS[item["kind"]]
    if item["status"] == WorkItem.Status.RUNNING:
        return f"round {item['round']}: {step} running on {item['worker'] or 'a worker'} ({what})"
    if item["queue"] not in served:
        return f"round {item['round']}: {step} waits for a worker of {item['queue']} (none online)"
    return f"round {item['round']}: {step} queued on {item['queue']}"


def campaign_waits(*, campaign: Campaign) -> dict[int, str]:
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
    served = served_queues()
    waits: dict[int, str] = {}
    for item in items:
        waits.setdefault(item["problem_id"], wait_text(item, served))
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
