"""Reads for workers."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from webapp.workers.models import WorkerHeartbeat


def workers_online(*, within_s: int | None = None) -> QuerySet[WorkerHeartbeat]:
    """Workers whose last heartbeat is recent and that did not announce a shutdown."""
    window = within_s if within_s is not None else settings.WORKER_ONLINE_SECONDS
    since = timezone.now() - timedelta(seconds=window)
    return WorkerHeartbeat.objects.filter(
        last_seen__gte=since, stopped__isnull=True
    ).select_related("gpu_environment")


def workers_all() -> QuerySet[WorkerHeartbeat]:
    return WorkerHeartbeat.objects.select_related("gpu_environment").order_by("-last_seen")


def queue_last_seen(*, queue: str) -> datetime | None:
    """When a worker last served ``queue`` (None: never): its last heartbeat, or when it shut
    down or its GPU failed a health probe."""
    seen = [
        w.gpu_failed or w.stopped or w.last_seen
        for w in WorkerHeartbeat.objects.only("queues", "last_seen", "stopped", "gpu_failed")
        if queue in w.queues
    ]
    return max(seen, default=None)
