"""Celery signal handlers that keep WorkerHeartbeat rows current while a worker lives.

worker_ready writes the first heartbeat and starts a daemon thread that writes one every
WORKER_HEARTBEAT_SECONDS; worker_shutdown stops the thread and marks the row stopped. They run in
the worker's main process only (the pool's children never see these signals).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from webapp.workers import services

logger = logging.getLogger(__name__)


class HeartbeatThread(threading.Thread):
    def __init__(
        self, *, hostname: str, queues: list[str], interval_s: float, app: Any = None
    ) -> None:
        super().__init__(name=f"heartbeat-{hostname}", daemon=True)
        self.hostname = hostname
        self.queues = queues
        self.app = app  # when given, the queues are read from it each beat (a cancelled one goes)
        self.interval_s = interval_s
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.interval_s):
                self.beat()
        finally:
            connection.close()

    def beat(self) -> None:
        close_old_connections()
        try:
            if self.app is not None:
                self.queues = consumed_queues(self.app)
            services.heartbeat_record(hostname=self.hostname, queues=self.queues)
        except Exception:  # a database hiccup must not kill the thread; the next beat retries
            logger.exception("heartbeat for %s failed", self.hostname)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout_s)


_thread: HeartbeatThread | None = None


def consumed_queues(app: Any) -> list[str]:
    return sorted(str(name) for name in app.amqp.queues.consume_from)


def on_worker_ready(sender: Any, **kwargs: Any) -> None:
    """sender: the worker's Consumer (has .hostname and .app)."""
    global _thread
    hostname = str(sender.hostname)
    queues = consumed_queues(sender.app)
    services.heartbeat_record(hostname=hostname, queues=queues, started=timezone.now())
    connection.close()  # the main thread does no other database work; pool children fork from it
    if _thread is not None:
        _thread.stop()
    _thread = HeartbeatThread(
        hostname=hostname,
        queues=queues,
        interval_s=settings.WORKER_HEARTBEAT_SECONDS,
        app=sender.app,
    )
    _thread.start()
    logger.info("heartbeat started for %s on queues %s", hostname, ",".join(queues))


def on_worker_shutdown(sender: Any, **kwargs: Any) -> None:
    """sender: the WorkController (has .hostname)."""
    global _thread
    if _thread is not None:
        _thread.stop()
        _thread = None
    hostname = str(getattr(sender, "hostname", "") or "")
    if hostname:
        close_old_connections()
        services.heartbeat_stop(hostname=hostname)
        connection.close()


def connect() -> None:
    """Hook the handlers to Celery's signals (idempotent: dispatch_uid)."""
    worker_ready.connect(on_worker_ready, weak=False, dispatch_uid="webapp-heartbeat-ready")
    worker_shutdown.connect(on_worker_shutdown, weak=False, dispatch_uid="webapp-heartbeat-stop")
