import threading
from types import SimpleNamespace
from unittest import mock

import pytest
from celery.signals import worker_ready, worker_shutdown

from webapp.workers import heartbeats
from webapp.workers.models import WorkerHeartbeat
from webapp.workers.selectors import workers_online

pytestmark = pytest.mark.django_db


class FakeConsumer:
    """What the handlers read from Celery's Consumer (worker_ready) and WorkController."""

    def __init__(self, hostname: str, queues: tuple[str, ...]) -> None:
        self.hostname = hostname
        self.app = SimpleNamespace(
            amqp=SimpleNamespace(queues=SimpleNamespace(consume_from=dict.fromkeys(queues)))
        )


def fake_consumer(hostname="main@box", queues=("default", "compile")) -> FakeConsumer:
    return FakeConsumer(hostname, queues)


@pytest.fixture
def quiet_thread(settings):
    """The background thread starts but does not beat during the test."""
    settings.WORKER_HEARTBEAT_SECONDS = 3600
    yield
    if heartbeats._thread is not None:
        heartbeats._thread.stop()
        heartbeats._thread = None


def test_worker_ready_records_the_worker_and_its_queues(quiet_thread):
    heartbeats.on_worker_ready(sender=fake_consumer())
    row = WorkerHeartbeat.objects.get()
    assert (row.hostname, row.queues, row.stopped) == ("main@box", ["compile", "default"], None)
    assert list(workers_online()) == [row]
    assert heartbeats._thread is not None
    assert heartbeats._thread.is_alive()


def test_worker_ready_is_delivered_through_the_celery_signal(quiet_thread):
    worker_ready.send(sender=fake_consumer("sig@box", ("gpu.sm90",)))
    assert WorkerHeartbeat.objects.get().serves_gpu


def test_worker_shutdown_stops_the_thread_and_marks_the_worker_stopped(quiet_thread):
    heartbeats.on_worker_ready(sender=fake_consumer())
    thread = heartbeats._thread
    worker_shutdown.send(sender=fake_consumer())
    assert not thread.is_alive()
    assert heartbeats._thread is None
    assert WorkerHeartbeat.objects.get().stopped is not None
    assert list(workers_online()) == []


def test_a_restarted_worker_is_online_again(quiet_thread):
    heartbeats.on_worker_ready(sender=fake_consumer())
    heartbeats.on_worker_shutdown(sender=SimpleNamespace(hostname="main@box"))
    heartbeats.on_worker_ready(sender=fake_consumer())
    assert WorkerHeartbeat.objects.count() == 1
    assert workers_online().count() == 1


def test_a_beat_refreshes_last_seen():
    thread = heartbeats.HeartbeatThread(hostname="main@box", queues=["default"], interval_s=60)
    thread.beat()
    first = WorkerHeartbeat.objects.get().last_seen
    thread.beat()
    assert WorkerHeartbeat.objects.get().last_seen > first


def test_the_thread_beats_on_its_interval_until_stopped():
    beats = threading.Semaphore(0)
    with mock.patch.object(
        heartbeats.services,
        "heartbeat_record",
        autospec=True,
        side_effect=lambda **kw: beats.release(),
    ) as record:
        thread = heartbeats.HeartbeatThread(hostname="h", queues=["default"], interval_s=0.01)
        with mock.patch.object(heartbeats, "connection"):
            thread.start()
            assert beats.acquire(timeout=5)
            assert beats.acquire(timeout=5)
            thread.stop()
    assert not thread.is_alive()
    record.assert_called_with(hostname="h", queues=["default"])


def test_a_failed_beat_is_logged_and_does_not_kill_the_thread(caplog):
    thread = heartbeats.HeartbeatThread(hostname="h", queues=[], interval_s=60)
    with mock.patch.object(
        heartbeats.services, "heartbeat_record", autospec=True, side_effect=RuntimeError("db down")
    ):
        thread.beat()
    assert "heartbeat for h failed" in caplog.text


def test_workers_online_ignores_silent_workers(quiet_thread, settings):
    heartbeats.on_worker_ready(sender=fake_consumer())
    assert workers_online(within_s=30).count() == 1
    WorkerHeartbeat.objects.update(
        last_seen=WorkerHeartbeat.objects.get().last_seen.replace(year=2000)
    )
    assert workers_online(within_s=30).count() == 0
