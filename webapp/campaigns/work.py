"""Work items and their leases: the database decides who runs what (the broker only delivers).

A task claims its item with one conditional UPDATE (queued → running, attempts + 1, a fresh lease
token), a LeaseKeeper thread extends the lease while the step works, and the step commits its
results only while it still holds the lease (work_item_hold). work_requeue, run periodically by
Celery beat (and by ``manage.py requeue_work``), starts queued campaigns, re-queues items whose
lease expired (a worker that died), fails those that used up their attempts, and re-sends queued
items whose message the broker seems to have lost (a Redis restart without persistence).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from engine.isolation import processes
from webapp.campaigns.models import Campaign, Problem, WorkItem, gpu_queue

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The item is no longer ours: its lease expired and it was re-queued or failed."""


def lease_delta() -> timedelta:
    return timedelta(seconds=settings.WORK_LEASE_SECONDS)


# -- sending -----------------------------------------------------------------------------------
def work_send(*, item_id: int, kind: str, queue: str, countdown: float = 0) -> None:
    """Send the item's task now; a broker error is logged (work_requeue sends it again)."""
    from webapp.campaigns import tasks

    task = {
        WorkItem.Kind.COMPILE: tasks.compile_step,
        WorkItem.Kind.GPU: tasks.gpu_step,
        WorkItem.Kind.FINAL: tasks.final_step,
    }[WorkItem.Kind(kind)]
    try:
        task.apply_async(args=[item_id], queue=queue, countdown=countdown or None)
    except Exception:
        logger.exception("could not send work item %s to %s; the periodic job will", item_id, queue)


def work_enqueue(item: WorkItem, *, countdown: float = 0) -> None:
    """Send the item's task once the current transaction commits."""
    item_id, kind, queue = item.id, item.kind, item.queue
    transaction.on_commit(
        lambda: work_send(item_id=item_id, kind=kind, queue=queue, countdown=countdown)
    )


def gpu_queue_for(problem: Problem) -> str:
    """The campaign's GPU pool when it has one, else the queue of the shape's arch."""
    pool = Campaign.objects.filter(id=problem.campaign_id).values_list("gpu_pool", flat=True)
    return gpu_queue(pool=pool.first() or "", arch=problem.arch)


def work_item_create(
    *, problem: Problem, kind: str, round: int, payload: dict[str, Any] | None = None
) -> WorkItem:
    """The (problem, round, kind) step, created once (a re-run step finds the one it made)."""
    queue = "compile" if kind == WorkItem.Kind.COMPILE else gpu_queue_for(problem)
    item, created = WorkItem.objects.get_or_create(
        problem=problem,
        round=round,
        kind=kind,
        defaults={
            "campaign_id": problem.campaign_id,
            "queue": queue,
            "payload": payload or {},
            "max_attempts": settings.WORK_MAX_ATTEMPTS,
            "enqueued": timezone.now(),
        },
    )
    if created:
        work_enqueue(item)
    return item


# -- claiming and holding ----------------------------------------------------------------------
def work_item_claim(*, item_id: int, hostname: str) -> str | None:
    """The lease token if this call claimed the item; None if it is not queued (done, failed,
    running elsewhere) or its campaign is not running (paused, cancelled)."""
    token = uuid.uuid4().hex
    claimed = WorkItem.objects.filter(
        id=item_id, status=WorkItem.Status.QUEUED, campaign__status=Campaign.Status.RUNNING
    ).update(
        status=WorkItem.Status.RUNNING,
        attempts=F("attempts") + 1,
        lease_token=token,
        lease_expires=timezone.now() + lease_delta(),
        worker=hostname,
    )
    return token if claimed == 1 else None


def work_item_extend(*, item_id: int, token: str) -> bool:
    """Push the lease out; False when it is no longer ours."""
    return (
        WorkItem.objects.filter(
            id=item_id, status=WorkItem.Status.RUNNING, lease_token=token
        ).update(lease_expires=timezone.now() + lease_delta())
        == 1
    )


def work_item_hold(*, item_id: int, token: str) -> WorkItem:
    """Lock the item for the rest of the transaction; LeaseLost unless we still hold it."""
    item = WorkItem.objects.select_for_update().get(id=item_id)
    if item.status != WorkItem.Status.RUNNING or item.lease_token != token:
        raise LeaseLost(f"work item {item_id} is {item.status} under another lease")
    if Campaign.objects.filter(id=item.campaign_id, status=Campaign.Status.CANCELLED).exists():
        raise LeaseLost(f"work item {item_id}: its campaign was cancelled")
    return item


def work_item_done(item: WorkItem, *, result: dict[str, Any]) -> None:
    """Inside the holding transaction."""
    item.status, item.result = WorkItem.Status.DONE, result
    item.lease_token, item.lease_expires = "", None
    item.save(update_fields=["status", "result", "lease_token", "lease_expires", "updated"])


def work_item_ours(*, item_id: int, token: str) -> bool:
    """Still running under this lease, for a campaign that was not cancelled."""
    return (
        WorkItem.objects.filter(id=item_id, status=WorkItem.Status.RUNNING, lease_token=token)
        .exclude(campaign__status=Campaign.Status.CANCELLED)
        .exists()
    )


class LeaseKeeper(threading.Thread):
    """Extends a lease every third of its length until stopped; ``lost`` once it could not.

    Every WORK_STOP_POLL_SECONDS it also checks that the item is still ours: once its campaign
    was cancelled, or its lease taken (re-queued by a worker shutting down, or expired), it kills
    this process's children (engine.isolation.processes.stop_children: nvcc, the GPU step's child, a
    hook) and later ones do not start, so the step ends within seconds and records nothing."""

    def __init__(self, *, item_id: int, token: str) -> None:
        super().__init__(name=f"lease-{item_id}", daemon=True)
        self.item_id, self.token = item_id, token
        self.stopping = threading.Event()
        self.lost = False

    def run(self) -> None:
        extend_every = settings.WORK_LEASE_SECONDS / 3
        poll = min(settings.WORK_STOP_POLL_SECONDS, extend_every)
        next_extend = time.monotonic() + extend_every
        try:
            while not self.stopping.wait(poll):
                close_old_connections()
                try:
                    if time.monotonic() >= next_extend:
                        next_extend = time.monotonic() + extend_every
                        if not work_item_extend(item_id=self.item_id, token=self.token):
                            return self._lose("its lease was taken")
                    if not work_item_ours(item_id=self.item_id, token=self.token):
                        return self._lose("its campaign was cancelled or its lease taken")
                except Exception:  # a database hiccup: the next beat retries
                    logger.exception("checking the lease of work item %s failed", self.item_id)
        finally:
            connection.close()

    def _lose(self, why: str) -> None:
        self.lost = True
        if not self.stopping.is_set():
            killed = processes.stop_children(f"work item {self.item_id}: {why}")
            logger.warning("work item %s: %s; stopped %d child process groups", self.item_id,
                           why, killed)  # fmt: skip

    def __enter__(self) -> LeaseKeeper:
        processes.allow_children()  # a stop for this process's previous task is over
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(10)
        processes.allow_children()


# -- failure, retry, expiry --------------------------------------------------------------------
def _problem_failed(item: WorkItem, reason: str) -> None:
    Problem.objects.filter(id=item.problem_id).update(
        status=Problem.Status.FAILED, stopped="failed", updated=timezone.now()
    )
    logger.error("work item %s failed for good: %s", item.id, reason)
    campaign_finish_if_done(campaign_id=item.campaign_id)


def work_item_retry_or_fail(
    *, item_id: int, token: str, reason: str, count_attempt: bool = True
) -> str:
    """After a failed step: back to queued (sent again after WORK_RETRY_DELAY_SECONDS) or, past
    the attempt cap, failed with the reason, its problem failed too. Returns the new status."""
    with transaction.atomic():
        try:
            item = work_item_hold(item_id=item_id, token=token)
        except LeaseLost:
            return "lost"
        if not count_attempt:
            item.attempts -= 1
        item.lease_token, item.lease_expires = "", None
        if item.attempts >= item.max_attempts:
            item.status = WorkItem.Status.FAILED
            item.reason = f"gave up after {item.attempts} attempts; last: {reason}"
            item.save()
            _problem_failed(item, item.reason)
        else:
            item.status = WorkItem.Status.QUEUED
            item.reason = f"attempt {item.attempts} failed: {reason}"
            item.enqueued = timezone.now()
            item.save()
            work_enqueue(item, countdown=settings.WORK_RETRY_DELAY_SECONDS)
        return item.status


UNFINISHED = (Problem.Status.QUEUED, Problem.Status.RUNNING, Problem.Status.FINALS)


def campaign_finish_if_done(*, campaign_id: int) -> None:
    """Once no problem is queued, running or in its finals: done if any finished, failed if
    all failed."""
    problems = Problem.objects.filter(campaign_id=campaign_id)
    if problems.filter(status__in=UNFINISHED).exists():
        return
    final = (
        Campaign.Status.DONE
        if problems.filter(status=Problem.Status.DONE).exists()
        else Campaign.Status.FAILED
    )
    Campaign.objects.filter(id=campaign_id, status=Campaign.Status.RUNNING).update(status=final)


def campaign_start_work(*, campaign: Campaign) -> int:
    """A round-0 compile step for each unfinished problem without work; re-send its queued items
    (a resumed campaign). Returns how many items were created or sent."""
    count = 0
    for problem in Problem.objects.filter(
        campaign=campaign, status__in=(Problem.Status.QUEUED, Problem.Status.RUNNING)
    ):
        if not problem.work_items.exists():
            work_item_create(problem=problem, kind=WorkItem.Kind.COMPILE, round=0)
            Problem.objects.filter(id=problem.id).update(status=Problem.Status.RUNNING)
            count += 1
    for item in WorkItem.objects.filter(campaign=campaign, status=WorkItem.Status.QUEUED):
        work_enqueue(item)
        count += 1
    campaign_finish_if_done(campaign_id=campaign.id)
    return count


def work_requeue() -> dict[str, int]:
    """The periodic job; see the module docstring. Returns what it did."""
    now = timezone.now()
    counts = {"started": 0, "requeued": 0, "failed": 0, "resent": 0}
    for campaign in Campaign.objects.filter(status=Campaign.Status.QUEUED):
        with transaction.atomic():
            if Campaign.objects.filter(id=campaign.id, status=Campaign.Status.QUEUED).update(
                status=Campaign.Status.RUNNING
            ):
                campaign_start_work(campaign=campaign)
                counts["started"] += 1
    expired = WorkItem.objects.filter(status=WorkItem.Status.RUNNING, lease_expires__lt=now)
    for item in expired:
        with transaction.atomic():
            try:
                held = work_item_hold(item_id=item.id, token=item.lease_token)
            except LeaseLost:
                continue
            if held.lease_expires is None or held.lease_expires >= now:
                continue  # extended meanwhile
            why = f"lease expired on {held.worker or 'a worker'} (attempt {held.attempts})"
            held.lease_token, held.lease_expires = "", None
            if held.attempts >= held.max_attempts:
                held.status = WorkItem.Status.FAILED
                held.reason = f"gave up after {held.attempts} attempts; last: {why}"
                held.save()
                _problem_failed(held, held.reason)
                counts["failed"] += 1
            else:
                held.status, held.reason, held.enqueued = WorkItem.Status.QUEUED, why, now
                held.save()
                work_enqueue(held)
                counts["requeued"] += 1
    stale = now - timedelta(seconds=settings.WORK_STALE_QUEUED_SECONDS)
    counts["resent"] = _resend_queued_before(stale, now=now)
    return counts


def _resend_queued_before(moment: datetime, *, now: datetime) -> int:
    """Send again the queued items of running campaigns last sent before ``moment``; each once,
    however many callers race (a conditional UPDATE of ``enqueued`` claims it)."""
    sent = 0
    for item in WorkItem.objects.filter(
        status=WorkItem.Status.QUEUED, campaign__status=Campaign.Status.RUNNING, enqueued__lt=moment
    ):
        if WorkItem.objects.filter(
            id=item.id, status=WorkItem.Status.QUEUED, enqueued=item.enqueued
        ).update(enqueued=now):
            work_send(item_id=item.id, kind=item.kind, queue=item.queue)
            sent += 1
    return sent


def work_resend_queued(*, before: float) -> int:
    """After a worker (re)connected to the broker at Unix time ``before``: what was sent before
    then may be gone with a restarted broker. Several workers reconnecting at once send each
    item once: the first marks it sent now, after the others' ``before``."""
    moment = datetime.fromtimestamp(before, tz=UTC)
    sent = _resend_queued_before(moment, now=timezone.now())
    if sent:
        logger.warning("a worker (re)connected to the broker: re-sent %d queued work items", sent)
    return sent


def work_release_worker(*, hostname: str) -> int:
    """A worker shutting down hands back the items it runs: queued again at once (the attempt
    not counted) and sent, so that another worker takes them now rather than after the lease
    expires; its own steps see the lease gone (LeaseKeeper) and stop their children. Returns
    how many it released."""
    released = 0
    for item in WorkItem.objects.filter(status=WorkItem.Status.RUNNING, worker=hostname):
        with transaction.atomic():
            changed = WorkItem.objects.filter(
                id=item.id, status=WorkItem.Status.RUNNING, lease_token=item.lease_token
            ).update(
                status=WorkItem.Status.QUEUED,
                attempts=F("attempts") - 1,
                lease_token="",
                lease_expires=None,
                reason=f"released by {hostname}, shutting down",
                enqueued=timezone.now(),
            )
            if changed:
                work_enqueue(item)
                released += 1
    return released
