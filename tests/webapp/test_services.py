"""End-to-end checks against the REAL servers: PostgreSQL, Redis, a Celery worker, the web server.

bin/test starts PostgreSQL and Redis and sets GEMMFORGE_REQUIRE_SERVICES=1, so there an unreachable
server fails these tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
from celery import Celery
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

pytestmark = [pytest.mark.services, pytest.mark.slow]


def unreachable(what: str, url: str, error: Exception) -> None:
    reason = f"{what} is not reachable at {url} ({error}); ./bin/test starts it"
    if os.environ.get("GEMMFORGE_REQUIRE_SERVICES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def app_env(**overrides: str) -> dict[str, str]:
    """Environment for a subprocess running the real (non-test) settings."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        SECRET_KEY="services-test-key",
        DEBUG="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def manage(env: dict[str, str], *args: str, timeout: int = 180) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


ROUND_TRIP = """
import json
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from engine.problem import Problem
from webapp.campaigns.models import Campaign, Candidate
from webapp.campaigns.services import campaign_create
from webapp.campaigns.selectors import candidates_best_first
from webapp.campaigns.times import campaign_times
from webapp.campaigns.models import WorkItem
from django.utils import timezone

owner = get_user_model().objects.create_user("pg-owner")
shapes = [Problem.parse("4096x4096x4096", "tn"), Problem.parse("8x8x8", "tn")]
made = campaign_create(owner=owner, name="pg", layout="tn", problems=shapes)
Campaign.objects.filter(id=made.id).update(proposer_mix={"policy": 0.75, "llm": 0.25})
campaign = Campaign.objects.get(id=made.id)
problem = campaign.problems.get(m=4096)
for name, reward in [("a", 0.9), ("b", None), ("c", 1.3)]:
    Candidate.objects.create(problem=problem, name=name, family="f", source=name,
                             source_hash=name * 64, proposer="policy", reward=reward,
                             timings={"cold_l2_median": {"median_us": 1.5}})
try:
    with transaction.atomic():
        Candidate.objects.create(problem=problem, name="dup", family="f", source="a",
                                 source_hash="a" * 64, proposer="policy")
    duplicate_rejected = False
except IntegrityError:
    duplicate_rejected = True
for kind, result in [("gpu", {"measured": 4, "ok": 0, "step_s": 3.0}),
                     ("gpu", {"measured": 4, "ok": 2, "step_s": 5.0})]:
    WorkItem.objects.create(campaign=campaign, problem=problem, kind=kind,
                            round=result["ok"], status="done", queue="gpu.sm90",
                            worker="gpu0", result=result)
times = campaign_times(campaign=campaign, now=timezone.now())
print(json.dumps({
    "status": campaign.status,
    "mix": campaign.proposer_mix,
    "problems": sorted(p.shape for p in campaign.problems.all()),
    "best_first": [c.name for c in candidates_best_first(problem=problem)],
    "duplicate_rejected": duplicate_rejected,
    "vendor": __import__("django.db", fromlist=["connection"]).connection.vendor,
    "times": [times.gpu_busy_s, times.candidates, times.gpu_workers,
              times.first_verified_s is not None],
}))
"""


def test_migrations_apply_and_a_campaign_round_trips_on_postgresql():
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        unreachable("PostgreSQL", POSTGRES_URL, exc)
    database = f"gemmforge_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{database}"))
        env = app_env(DATABASE_URL=url)
        manage(env, "migrate", "--noinput")
        manage(env, "makemigrations", "--check", "--dry-run")
        lines = manage(env, "shell", "-c", ROUND_TRIP).strip().splitlines()
        result = json.loads(lines[-1])
        assert result == {
            "status": "queued",
            "mix": {"policy": 0.75, "llm": 0.25},
            "problems": ["4096x4096x4096", "8x8x8"],
            "best_first": ["c", "a", "b"],
            "duplicate_rejected": True,
            "vendor": "postgresql",
            "times": [8.0, 8, 1, True],
        }
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_for(predicate, what: str, timeout_s: float, processes=()) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process, log in processes:
            if process.poll() is not None:
                pytest.fail(f"{what}: a process exited early:\n{Path(log).read_text()[-4000:]}")
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.3)
    logs = "\n".join(Path(log).read_text()[-3000:] for _, log in processes)
    pytest.fail(f"timed out waiting for {what}\n{logs}")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def test_a_real_worker_answers_ping_and_shows_on_the_workers_page(tmp_path):
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        unreachable("Redis", REDIS_URL, exc)
    token = uuid.uuid4().hex[:10]
    queue, hostname = f"test-{token}", f"test-{token}@{socket.gethostname()}"
    env = app_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        REDIS_URL=REDIS_URL,
        STATIC_ROOT=str(tmp_path / "static"),
        GEMMFORGE_NAMESPACE=f"test-{token}",  # every key of the worker's starts with it
    )
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput")
    port = free_port()
    worker_log, web_log = tmp_path / "worker.log", tmp_path / "web.log"
    worker = start(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", queue, "-n", hostname,
         "--concurrency", "1", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
        env,
        worker_log,
    )  # fmt: skip
    web = start(
        [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1"],
        env,
        web_log,
    )  # fmt: skip
    client = Celery("services-test", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
    client.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_transport_options={"global_keyprefix": f"test-{token}:"},
        result_backend_transport_options={"global_keyprefix": f"test-{token}:"},
    )
    try:
        result = client.send_task(
            "webapp.workers.tasks.ping", kwargs={"payload": token}, queue=queue
        )
        answer = result.get(timeout=120)
        assert answer["pong"] == token
        assert answer["hostname"] == hostname

        workers_page = f"http://127.0.0.1:{port}/workers/"
        procs = [(worker, worker_log), (web, web_log)]
        wait_for(lambda: hostname in fetch(workers_page), "the worker on /workers/", 60, procs)
        page = fetch(workers_page)
        assert "connected" in page
        assert queue in page
        assert hostname in fetch(f"http://127.0.0.1:{port}/")

        stop(worker)  # warm shutdown: worker_shutdown marks the row stopped
        assert worker.returncode == 0, worker_log.read_text()[-4000:]
        dashboard = fetch(f"http://127.0.0.1:{port}/")
        assert hostname not in dashboard
        assert "No Celery worker is connected" in dashboard
    finally:
        stop(worker)
        stop(web)
        client.close()
        _forget_namespace(f"test-{token}:")


def _forget_namespace(prefix: str) -> None:
    """Drop every key the throwaway namespace left in Redis (bindings, queues, results)."""
    r = redis.Redis.from_url(REDIS_URL)
    for key in r.scan_iter(match=f"{prefix}*"):
        r.delete(key)
