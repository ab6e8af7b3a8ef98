"""Reads for workers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.utils import timezone

from webapp.workers.models import WorkerHeartbeat


def online_since(*, within_s: int | None = None) -> datetime:
    """A worker whose last heartbeat is older than this is offline."""
    window = within_s if within_s is not None else settings.WORKER_ONLINE_SECONDS
    return timezone.now() - timedelta(seconds=window)


def is_online(since: datetime) -> Q:
    """The one rule: a worker is online when its last heartbeat came after ``since`` and it did
    not announce a shutdown."""
    return Q(last_seen__gte=since, stopped__isnull=True)


def workers_online(*, within_s: int | None = None) -> QuerySet[WorkerHeartbeat]:
    """Workers whose last heartbeat is recent and that did not announce a shutdown."""
    return WorkerHeartbeat.objects.filter(
        is_online(online_since(within_s=within_s))
    ).select_related("gpu_environment")


def workers_all() -> QuerySet[WorkerHeartbeat]:
    return WorkerHeartbeat.objects.select_related("gpu_environment").order_by("-last_seen")


@dataclass(frozen=True)
class Heartbeats:
    """Every worker's heartbeat, read once for a page: a page about many campaigns asks it, not
    the database, which queues the workers serve."""

    online: tuple[WorkerHeartbeat, ...]  # as workers_online selects them, by hostname
    offline: tuple[WorkerHeartbeat, ...]

    @cached_property
    def served(self) -> frozenset[str]:
        """The queues of the online workers whose GPU did not fail a health probe."""
        return frozenset(str(q) for w in self.online if w.gpu_failed is None for q in w.queues)

    def last_served(self, queue: str) -> datetime | None:
        """When a worker last served ``queue`` (None: never): its last heartbeat, or when it
        shut down or its GPU failed a health probe."""
        seen = [
            w.gpu_failed or w.stopped or w.last_seen
            for w in self.online + self.offline
            if queue in w.queues
        ]
        return max(seen, default=None)


def heartbeats_read(*, within_s: int | None = None) -> Heartbeats:
    """All heartbeats in one query, split as workers_online splits them."""
    rule = ExpressionWrapper(is_online(online_since(within_s=within_s)), BooleanField())
    online: list[WorkerHeartbeat] = []
    offline: list[WorkerHeartbeat] = []
    for worker in WorkerHeartbeat.objects.select_related("gpu_environment").annotate(online=rule):
        (online if worker.online else offline).append(worker)
    return Heartbeats(tuple(online), tuple(offline))
