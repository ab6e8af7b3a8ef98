"""Writes for worker heartbeats."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from webapp.workers.models import WorkerHeartbeat


def heartbeat_record(
    *, hostname: str, queues: list[str], started: datetime | None = None
) -> WorkerHeartbeat:
    """Mark `hostname` alive now; `started` is given once, when the worker comes up."""
    now = timezone.now()
    defaults: dict[str, object] = {"queues": sorted(queues), "last_seen": now, "stopped": None}
    if started is not None:  # a (re)started worker: its GPU gets a fresh chance
        defaults.update(started=started, gpu_failed=None, gpu_failure="")
    heartbeat, _ = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults=defaults,
        create_defaults={**defaults, "started": started or now},
    )
    return heartbeat


def heartbeat_stop(*, hostname: str) -> None:
    now = timezone.now()
    WorkerHeartbeat.objects.filter(hostname=hostname).update(stopped=now, last_seen=now)


def heartbeat_gpu_failed(*, hostname: str, queue: str, reason: str) -> None:
    """Its GPU failed a health probe: it no longer consumes ``queue``; the dashboard says why."""
    row, _ = WorkerHeartbeat.objects.get_or_create(
        hostname=hostname,
        defaults={"queues": [], "started": timezone.now(), "last_seen": timezone.now()},
    )
    row.queues = [q for q in row.queues if q != queue]
    row.gpu_failed, row.gpu_failure = timezone.now(), reason[:2000]
    row.save(update_fields=["queues", "gpu_failed", "gpu_failure"])
