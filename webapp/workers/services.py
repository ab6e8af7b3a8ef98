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
    if started is not None:
        defaults["started"] = started
    heartbeat, _ = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults=defaults,
        create_defaults={**defaults, "started": started or now},
    )
    return heartbeat


def heartbeat_stop(*, hostname: str) -> None:
    now = timezone.now()
    WorkerHeartbeat.objects.filter(hostname=hostname).update(stopped=now, last_seen=now)
