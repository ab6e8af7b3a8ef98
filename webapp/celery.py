"""The Celery app "webapp"; its configuration is the CELERY_* block of webapp/settings.py.

Each worker says in its log which broker and key namespace it uses, and every time it connects
to the broker (its start, and each reconnect after the broker went away) it asks for the queued
work items to be sent again: a Redis restarted without persistence lost their messages, and
without this they would wait for WORK_STALE_QUEUED_SECONDS.
"""

import logging
import os
import time

from celery import Celery, bootsteps
from celery.signals import celeryd_after_setup, worker_shutting_down
from kombu.utils.url import maybe_sanitize_url

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

logger = logging.getLogger(__name__)

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

RESEND_TASK = "webapp.campaigns.tasks.work_resend"


class ResendOnConnect(bootsteps.StartStopStep):
    """A consumer step: ``start`` runs when the worker has connected, first and after every
    reconnect (the consumer blueprint restarts its steps)."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c) -> None:  # c: the Consumer
        connected = time.time()
        try:
            c.app.send_task(RESEND_TASK, kwargs={"before": connected}, queue="default")
        except Exception:  # the broker went away again: the next connection asks again
            logger.exception("could not ask for lost work items to be sent again")
        else:
            logger.info("connected to the broker: asked for queued work items to be re-sent")


app.steps["consumer"].add(ResendOnConnect)


def broker_description() -> str:
    from django.conf import settings

    return (
        f"broker {maybe_sanitize_url(settings.CELERY_BROKER_URL)}, every key prefixed "
        f"{settings.GEMMFORGE_NAMESPACE}: (GEMMFORGE_NAMESPACE)"
    )


@celeryd_after_setup.connect
def announce_broker(sender: str, **_kwargs) -> None:
    """Loudly, in the worker's log: a worker on the wrong broker or namespace waits forever."""
    logger.warning("worker %s: %s", sender, broker_description())


@worker_shutting_down.connect
def release_work(sender: str, **_kwargs) -> None:
    """A stopping worker (Ctrl-C in bin/run, SIGTERM) hands its running work items back at once:
    its steps see their leases gone and kill their children (nvcc, the GPU step's child) within
    seconds, so the warm shutdown does not wait minutes for compiles whose results it would
    record for a worker that is going away."""
    from django.db import connection

    from webapp.campaigns.work import work_release_worker

    try:
        released = work_release_worker(hostname=sender)
    except Exception:
        logger.exception("worker %s: could not hand its work items back", sender)
        return
    finally:
        connection.close()
    if released:
        logger.warning("worker %s shutting down: handed %d running work items back", sender,
                       released)  # fmt: skip
