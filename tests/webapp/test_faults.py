"""Fault tests against REAL servers: PostgreSQL (a throwaway database for this module), a Redis of
our own (redis-server on a spare port, never the shared one: one test restarts it), real Celery
workers and Celery beat as subprocesses, the GPU step replayed from the recorded H200 run.

(a) kill -9 a worker mid-campaign → another finishes it, no candidate lost or measured twice;
(b) restart Redis mid-campaign → it completes, the lost messages re-sent when the worker
reconnects; (c) a compile step that hangs → timed out, recorded, the campaign goes on; (d) a step
that always crashes → stops at the attempt cap; (e) cancel a campaign, or stop the worker, while
a compile runs → its process group is killed within seconds, nothing is recorded; (f) Redis
frozen (SIGSTOP) → launching still answers, no 500; (g) two installs on one Redis keep apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from engine.campaign.round import batch_size_for

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"

pytestmark = [pytest.mark.services, pytest.mark.slow]


def unreachable(reason: str) -> None:
    if os.environ.get("GEMMFORGE_REQUIRE_SERVICES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRedis:
    """A redis-server of this module's own, without persistence (a restart loses everything)."""

    def __init__(self, tmp: Path) -> None:
        self.port, self.tmp = free_port(), tmp
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """(environment for the app's subprocesses, a psycopg connection to the throwaway database)."""
    if shutil.which("redis-server") is None:
        unreachable("redis-server is not installed; ./bin/test installs it")
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        unreachable(f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}); ./bin/test starts it")
    tmp = tmp_path_factory.mktemp("faults")
    redis = OwnRedis(tmp)
    redis.start()
    database = f"gemmforge_faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{database}"))
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        SECRET_KEY="faults-test-key",
        DEBUG="0",
        PYTHONUNBUFFERED="1",
        DATABASE_URL=url,
        REDIS_URL=redis.url,
        GEMMFORGE_EXECUTOR=f"replay:{RECORDED_RUN}",
        GEMMFORGE_BATCH_SIZE="4",
        WORK_LEASE_SECONDS="6",
        WORK_REQUEUE_SECONDS="1",
        WORK_STALE_QUEUED_SECONDS="4",
        WORK_RETRY_DELAY_SECONDS="0",
        WORKER_HEARTBEAT_SECONDS="2",
        LOG_LEVEL="INFO",
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
    conn = psycopg.connect(url, autocommit=True)
    try:
        yield env, conn, redis
    finally:
        conn.close()
        redis.stop()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


CREATE = """
import json, sys
from django.contrib.auth import get_user_model
from engine.problem import Problem
from webapp.campaigns.services import campaign_create
owner, _ = get_user_model().objects.get_or_create(username="faults")
shapes = [Problem.parse(s, "tn") for s in sys.argv[1].split(",")]
c = campaign_create(owner=owner, name=sys.argv[2], layout="tn", problems=shapes,
                    budget_per_shape=int(sys.argv[3]), proposer_mix={"evolve": 0.5, "random": 0.5})
print(json.dumps({"id": c.id}))
"""


def create_campaign(env, name: str, shapes: str, budget: int) -> int:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); exec(open(0).read())",
            shapes,
            name,
            str(budget),
        ],
        input=CREATE,
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["id"]


class Stack:
    """Celery beat and workers for one test; everything it started is killed at the end."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str]) -> None:
        log = (self.tmp / f"{name}.log").open("w")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webapp", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def worker(self, name: str) -> str:
        hostname = f"{name}@faults"
        self.start(
            name,
            [
                "worker",
                "-Q",
                "default,compile,gpu.sm90",
                "-n",
                hostname,
                "--concurrency",
                "1",
                "--prefetch-multiplier",
                "1",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
        )
        return hostname

    def beat(self) -> None:
        self.start("beat", ["beat", "-s", str(self.tmp / "beat-schedule"), "--loglevel", "INFO"])

    def kill(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill(name)

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(self.tmp.glob("*.log"))
        )


@pytest.fixture
def stack(services, tmp_path):
    env, _, _ = services
    log = tmp_path / "executions.log"
    log.touch()
    stack = Stack({**env, "GEMMFORGE_EXECUTION_LOG": str(log)}, tmp_path)
    stack.executions = log
    yield stack
    stack.close()


def one(conn, query: str, *params):
    return conn.execute(query, params).fetchone()


def wait_until(predicate, what: str, stack: Stack, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}\n{stack.logs()}")


def campaign_status(conn, campaign_id: int) -> str:
    return one(conn, "SELECT status FROM campaigns_campaign WHERE id = %s", campaign_id)[0]


def finished(conn, campaign_id: int):
    return lambda: campaign_status(conn, campaign_id) in ("done", "failed")


def candidates(conn, campaign_id: int) -> list[tuple]:
    return conn.execute(
        "SELECT p.m, p.n, p.k, p.layout, c.name, c.status, c.compile_status, c.failure_reason, "
        "c.outcome IS NOT NULL FROM campaigns_candidate c JOIN campaigns_problem p "
        "ON c.problem_id = p.id WHERE p.campaign_id = %s ORDER BY c.id",
        (campaign_id,),
    ).fetchall()


def items(conn, campaign_id: int) -> str:
    rows = conn.execute(
        "SELECT id, problem_id, kind, round, status, attempts, worker, reason, updated "
        "FROM campaigns_workitem WHERE campaign_id = %s ORDER BY id",
        (campaign_id,),
    ).fetchall()
    return "\n".join(map(str, rows))


def executions(stack: Stack) -> Counter:
    lines = stack.executions.read_text().splitlines()
    return Counter(line for line in lines if not line.startswith("#"))


def measured(rows) -> Counter:
    return Counter(f"{m}x{n}x{k}_{layout} {name}" for m, n, k, layout, name, *_ in rows)


def test_a_killed_worker_loses_nothing_and_measures_nothing_twice(services, stack):
    env, conn, _ = services
    stack.env["GEMMFORGE_REPLAY_DELAY_MS"] = "1500"  # the GPU step's child sleeps, then measures
    campaign = create_campaign(env, "kill", "4096x4096x4096,1024x1024x1024", 8)
    stack.beat()
    hosts = {stack.worker("w1"): "w1", stack.worker("w2"): "w2"}
    victim: list[str] = []

    def a_gpu_step_is_running() -> bool:
        row = one(
            conn,
            "SELECT worker FROM campaigns_workitem WHERE campaign_id = %s AND "
            "kind = 'gpu' AND status = 'running'",
            campaign,
        )
        if row:
            victim.append(row[0])
        return bool(row)

    wait_until(a_gpu_step_is_running, "a running GPU step", stack)
    stack.kill(hosts[victim[0]])
    killed_at = time.time()
    wait_until(finished(conn, campaign), "the campaign to finish", stack)
    assert campaign_status(conn, campaign) == "done"
    rows = candidates(conn, campaign)
    assert len(rows) == 16, "2 shapes × budget 8"
    assert all(recorded for *_, recorded in rows)
    assert executions(stack) == measured(rows), (  # each candidate executed exactly once
        f"killed at {killed_at:.2f}\n{items(conn, campaign)}\n{stack.executions.read_text()}"
    )
    requeued = one(
        conn,
        "SELECT count(*) FROM campaigns_workitem WHERE campaign_id = %s AND "
        "attempts = 2 AND reason LIKE %s",
        campaign,
        f"lease expired on {victim[0]}%",
    )
    assert requeued[0] == 1


def test_a_redis_restart_mid_campaign_is_survived(services, stack):
    env, conn, redis = services
    stack.env["GEMMFORGE_REPLAY_DELAY_MS"] = "500"
    # the periodic re-send of stale messages cannot help within this test: the worker's
    # reconnection must ask for the lost messages (webapp.celery.ResendOnConnect)
    stack.env["WORK_STALE_QUEUED_SECONDS"] = "600"
    campaign = create_campaign(env, "redis", "4096x4096x4096,1024x1024x1024", 8)
    stack.beat()
    stack.worker("r1")
    recorded = (
        "SELECT count(*) FROM campaigns_candidate c JOIN campaigns_problem p ON "
        "c.problem_id = p.id WHERE p.campaign_id = %s AND c.outcome IS NOT NULL"
    )
    wait_until(lambda: one(conn, recorded, campaign)[0] >= 4, "the first results", stack)
    redis.stop()  # no persistence: every queued message is lost
    time.sleep(1)
    redis.start()
    wait_until(finished(conn, campaign), "the campaign to finish after the restart", stack, 120)
    assert campaign_status(conn, campaign) == "done"
    rows = candidates(conn, campaign)
    assert len(rows) == 16
    assert all(recorded for *_, recorded in rows)
    assert executions(stack) == measured(rows)


def test_a_hanging_compile_is_timed_out_recorded_and_the_campaign_goes_on(
    services, stack, tmp_path
):
    env, conn, _ = services
    marker = tmp_path / "hung-once"
    # the first compile step hangs (sleep 60) and is killed after 2 s; later ones succeed
    stack.env["GEMMFORGE_COMPILE_HOOK"] = f"sh -c 'mkdir {marker} 2>/dev/null && sleep 60 || true'"
    stack.env["COMPILE_STEP_TIMEOUT"] = "2"
    campaign = create_campaign(env, "hang", "4096x4096x4096", 8)
    stack.beat()
    stack.worker("h1")
    wait_until(finished(conn, campaign), "the campaign to finish", stack)
    assert campaign_status(conn, campaign) == "done"
    rows = candidates(conn, campaign)
    assert len(rows) == 8
    timed_out = [r for r in rows if r[6] == "timeout"]
    assert len(timed_out) == batch_size_for(8, cap=4), "the hung batch (budget/4, at most 4)"
    assert all("compile step timed out after 2 s: sh -c" in r[7] for r in timed_out)
    assert sum(r[5] == "done" for r in rows) >= 1  # the next rounds were measured
    assert executions(stack) == measured([r for r in rows if r[6] != "timeout"])


def test_a_step_that_always_crashes_stops_at_the_attempt_cap(services, stack):
    env, conn, _ = services
    stack.env["GEMMFORGE_CRASH_STEP"] = "gpu"
    campaign = create_campaign(env, "crash", "4096x4096x4096", 8)
    stack.beat()
    stack.worker("c1")
    wait_until(finished(conn, campaign), "the campaign to stop", stack)
    assert campaign_status(conn, campaign) == "failed"
    status, attempts, reason = one(
        conn,
        "SELECT status, attempts, reason FROM campaigns_workitem "
        "WHERE campaign_id = %s AND kind = 'gpu'",
        campaign,
    )
    assert (status, attempts) == ("failed", 3)
    assert reason.startswith("gave up after 3 attempts; last: RuntimeError: injected crash")
    problem = one(
        conn, "SELECT status, stopped FROM campaigns_problem WHERE campaign_id = %s", campaign
    )
    assert problem == ("failed", "failed")
    assert executions(stack) == Counter()


# --- (e) cancel and shutdown stop the step's children within seconds ----------------------------


def hanging_hook(stack: Stack, tmp_path: Path) -> Path:
    """Every compile step runs a 300 s command (nvcc's stand-in) that writes its pid first."""
    pidfile = tmp_path / "hook.pid"
    stack.env["GEMMFORGE_COMPILE_HOOK"] = f"sh -c 'echo $$ > {pidfile}; exec sleep 300'"
    stack.env["COMPILE_STEP_TIMEOUT"] = "600"
    return pidfile


def hook_pid(pidfile: Path, stack: Stack) -> int:
    wait_until(lambda: pidfile.is_file() and pidfile.read_text().strip(), "the hook", stack)
    return int(pidfile.read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_cancelling_kills_the_running_compile_within_seconds_and_records_nothing(
    services, stack, tmp_path
):
    env, conn, _ = services
    pidfile = hanging_hook(stack, tmp_path)
    campaign = create_campaign(env, "cancel", "4096x4096x4096", 8)
    stack.beat()
    stack.worker("k1")
    pid = hook_pid(pidfile, stack)
    # what services.campaign_control("cancel") does: one conditional UPDATE of the status
    conn.execute("UPDATE campaigns_campaign SET status = 'cancelled' WHERE id = %s", (campaign,))
    cancelled = time.monotonic()
    wait_until(lambda: not alive(pid), "the hook to be killed", stack, timeout_s=10)
    assert time.monotonic() - cancelled < 5
    time.sleep(2)  # the step has ended: nothing of it is recorded
    assert candidates(conn, campaign) == []
    assert campaign_status(conn, campaign) == "cancelled"
    log = (stack.tmp / "k1.log").read_text()
    assert "its campaign was cancelled" in log
    # the worker says which broker and namespace it uses (a worker elsewhere must match them)
    broker = f"127.0.0.1:{services[2].port}"
    assert re.search(rf"worker k1@faults: broker redis://{broker}/0, every key prefixed gf-", log)


def test_stopping_a_worker_kills_its_compile_and_hands_the_item_back(services, stack, tmp_path):
    env, conn, _ = services
    pidfile = hanging_hook(stack, tmp_path)
    campaign = create_campaign(env, "shutdown", "4096x4096x4096", 8)
    stack.beat()
    stack.worker("s1")
    pid = hook_pid(pidfile, stack)
    worker = stack.processes["s1"]
    stopped = time.monotonic()
    worker.send_signal(signal.SIGTERM)  # what bin/run's Ctrl-C sends: a warm shutdown
    worker.wait(30)
    assert time.monotonic() - stopped < 15, stack.logs()  # was the compile's 300 s
    assert not alive(pid)
    status, attempts, reason = one(
        conn,
        "SELECT status, attempts, reason FROM campaigns_workitem WHERE campaign_id = %s",
        campaign,
    )
    assert (status, attempts) == ("queued", 0)
    assert reason == "released by s1@faults, shutting down"
    assert candidates(conn, campaign) == []


# --- (f) Redis frozen: launching answers ------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path):
    if shutil.which("redis-server") is None:
        unreachable("redis-server is not installed; ./bin/test installs it")
    redis = OwnRedis(tmp_path)
    redis.start()
    yield redis
    if redis.process is not None and redis.process.poll() is None:
        os.kill(redis.process.pid, signal.SIGCONT)
    redis.stop()


def production_cache(url: str) -> dict:
    """The cache of webapp/settings.py (its socket timeouts, its key prefix) at ``url``."""
    import webapp.settings as real

    return {"default": {**real.CACHES["default"], "LOCATION": url}}


LAUNCH = {
    "name": "frozen",
    "shapes": "4096x4096x4096",
    "layout": "tn",
    "budget_per_shape": "64",
    "proposer_mix": "rl=1",
    "reward_protocol": "device",
    "launch_without_worker": "on",  # no GPU worker runs in these tests
}


@pytest.mark.django_db
def test_launching_while_redis_is_frozen_answers_and_keeps_the_limit(
    own_redis, alice_client, alice, settings, monkeypatch
):
    from types import SimpleNamespace

    from django.test import Client

    from webapp import ratelimit
    from webapp.campaigns.models import Campaign

    # every request in one rate window: a window boundary crossed while Redis is frozen (its
    # socket timeout) would start the count afresh and let the third launch through
    now = time.time()
    monkeypatch.setattr(
        ratelimit, "time", SimpleNamespace(time=lambda: now, monotonic=time.monotonic)
    )
    settings.CACHES = production_cache(own_redis.url)
    settings.LAUNCH_RATE_LIMIT = 2
    assert alice_client.post("/campaigns/new/", LAUNCH).status_code == 302  # counted in Redis
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        response = alice_client.post("/campaigns/new/", LAUNCH)
        took = time.monotonic() - started
        assert response.status_code == 302, response.content[:2000]
        assert took < 2 * settings.REDIS_SOCKET_TIMEOUT_SECONDS + 2
        # a limit still holds, counted afresh in this process meanwhile (it cannot read what
        # Redis had); Redis is not waited for on each request
        started = time.monotonic()
        accepted = alice_client.post("/campaigns/new/", LAUNCH)
        refused = alice_client.post("/campaigns/new/", LAUNCH)
        assert time.monotonic() - started < 1
        assert (accepted.status_code, refused.status_code) == (302, 429)
        assert "Too many launches" in refused.content.decode()
        # logging in (its failures are counted the same way) answers too
        login = Client().post("/accounts/login/", {"username": "alice", "password": "x"})
        assert login.status_code == 200
        # and reading pages needs no Redis at all
        assert alice_client.get("/").status_code == 200
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    assert Campaign.objects.filter(owner=alice).count() == 3


# --- (g) two installs on one Redis -------------------------------------------------------------


def test_two_installs_on_one_redis_never_take_each_others_work(own_redis):
    import redis as redis_client
    from celery import Celery

    def install(namespace: str) -> Celery:
        """A Celery app configured as webapp/settings.py configures it for ``namespace``."""
        app = Celery(namespace, broker=own_redis.url, backend=own_redis.url, set_as_current=False)
        app.conf.broker_transport_options = {"global_keyprefix": f"{namespace}:"}
        app.conf.result_backend_transport_options = {"global_keyprefix": f"{namespace}:"}
        return app

    first, second = install("gf-first"), install("gf-second")
    try:
        first.send_task("webapp.workers.tasks.ping", queue="compile")
        raw = redis_client.Redis.from_url(own_redis.url)
        assert raw.llen("gf-first:compile") == 1
        assert raw.llen("compile") == raw.llen("gf-second:compile") == 0
        with second.connection_for_read() as conn:
            assert conn.default_channel.basic_get("compile") is None
        with first.connection_for_read() as conn:
            message = conn.default_channel.basic_get("compile")
            assert message is not None
            assert message.headers["task"] == "webapp.workers.tasks.ping"
    finally:
        first.close()
        second.close()
