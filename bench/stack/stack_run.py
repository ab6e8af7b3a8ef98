"""A campaign through the whole stack on one machine, on the GPU (and, with --split-queues, a
check that each shape's work reaches its own GPU queue).

Starts a redis-server of its own (PATH first, else Debian's packages in .deb/ unpacked with
dpkg -x), migrates a throwaway SQLite database, starts Celery workers as subprocesses (compile
workers on ``compile``, GPU workers with concurrency 1 and prefetch 1, one bookkeeping worker on
``default``, beat) and gunicorn; logs in and launches a campaign through the web form; samples
the GPU's utilisation every 0.5 s (NVML, else nvidia-smi) while it runs; probes a few pages and
progress.json; waits until the campaign ends or --deadline passes; then stops everything (process
groups) and writes $OUT/stack.json (environment, timings, candidates, candidates per hour, GPU
busy fraction overall and once compiles are warm, per-worker counts, checks), stack-logs.txt
(every log, cut to about 2 MB), stack-gpu.csv (the samples) and stack-db.sqlite3. Whatever fails,
stack.json is written, with the error.

    python3 bench/stack/stack_run.py --out "$OUT"                       # on the GPU machine
    .venv/bin/python bench/stack/stack_run.py --out out/stack \\
        --executor replay:bench/results/2026-12-02-h200-families/families-run1.json \\
        --shapes 4096x4096x4096,1024x1024x1024 --budget 8 --deadline 120   # CPU, recorded times
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.cookiejar
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHAPES = "4096x4096x4096,8192x1024x4096"
DEFAULT_MIX = "rl=0.5, evolve=0.3, random=0.2"  # the launch form's default
SPLIT_POOLS = ("sm90", "sm80")  # --split-queues: GPU worker i consumes gpu.<SPLIT_POOLS[i]>
SAMPLE_INTERVAL_S = 0.5
POLL_INTERVAL_S = 0.5
WEB_PROBE_INTERVAL_S = 5.0
REPORT_EVERY_S = 10.0
LOG_BUDGET_BYTES = 2_000_000
BUSY_TARGET = 0.80
FINISHED = ("done", "failed", "cancelled")
LEASE_SECONDS = 120  # WORK_LEASE_SECONDS for the app (the claim time is read back from it)


class StackError(Exception):
    """An expected failure (a server that did not start, a launch the form refused...)."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT: stop, but still shut down and write the report."""


@dataclass
class Options:
    out: Path
    shapes: list[str]
    layout: str
    budget: int
    batch: int
    deadline_s: float
    executor: str
    space: str
    mix: str
    compile_workers: int
    gpu_workers: int
    split_queues: bool
    gpu_index: int
    verify_jobs: int
    device_seconds: int
    replay_delay_ms: int
    redis_server: str | None
    deb_dir: Path
    keep: bool

    @property
    def replay(self) -> bool:
        return self.executor.startswith("replay:")


def parse_args(argv: Sequence[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK, comma separated")
    p.add_argument("--layout", default="nn", choices=("nn", "tn"))
    p.add_argument("--budget", type=int, default=16, help="candidates per shape")
    p.add_argument(
        "--batch", type=int, default=8, help="candidates per round (GEMMFORGE_BATCH_SIZE)"
    )
    p.add_argument("--deadline", type=float, default=300, help="seconds the campaign may run")
    p.add_argument("--executor", default="local", help="local, or replay:<recorded json>")
    p.add_argument("--space", default="library", choices=("library", "full"))
    p.add_argument("--mix", default=DEFAULT_MIX, help="proposer shares, as the launch form takes")
    p.add_argument("--compile-workers", type=int, default=2)
    p.add_argument("--gpu-workers", type=int, default=1, choices=(1, 2))
    p.add_argument(
        "--split-queues",
        action="store_true",
        help="one campaign per shape, each routed to its own GPU pool queue, one GPU "
        "worker per queue (all on the same GPU); implies --gpu-workers 2",
    )
    p.add_argument("--gpu", type=int, default=0, help="GPU index (CUDA and NVML)")
    p.add_argument("--verify-jobs", type=int, default=8, help="GEMMFORGE_VERIFY_JOBS")
    p.add_argument("--device-seconds", type=int, default=20, help="GEMMFORGE_DEVICE_SECONDS")
    p.add_argument("--replay-delay-ms", type=int, default=0, help="replay: simulated GPU time")
    p.add_argument("--redis-server", help="redis-server binary (default: PATH, then .deb/)")
    p.add_argument("--deb-dir", type=Path, default=ROOT / ".deb")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = p.parse_args(argv)
    shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    if not shapes:
        p.error("--shapes names no shape")
    if a.split_queues and len(shapes) != 2:
        p.error("--split-queues routes each of exactly 2 shapes to its own queue")
    return Options(
        out=a.out.resolve(),
        shapes=shapes,
        layout=a.layout,
        budget=a.budget,
        batch=a.batch,
        deadline_s=a.deadline,
        executor=absolute_executor(a.executor),
        space=a.space,
        mix=a.mix,
        compile_workers=max(1, a.compile_workers),
        gpu_workers=2 if a.split_queues else a.gpu_workers,
        split_queues=a.split_queues,
        gpu_index=a.gpu,
        verify_jobs=a.verify_jobs,
        device_seconds=a.device_seconds,
        replay_delay_ms=a.replay_delay_ms,
        redis_server=a.redis_server,
        deb_dir=a.deb_dir.resolve(),
        keep=a.keep,
    )


def absolute_executor(spec: str) -> str:
    if spec.startswith("replay:"):
        path = Path(spec[len("replay:") :])
        return f"replay:{path if path.is_absolute() else (Path.cwd() / path).resolve()}"
    return spec


# -- processes ---------------------------------------------------------------------------------
def die_with_parent() -> None:
    """In the child before exec: SIGKILL when this script dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Processes:
    """Children, each in a session (process group) of its own, logging to logs/<name>.log."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.started[name] = process
        return process

    def exited(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.started.items() if p.poll() is not None}

    def stop(self, names: Iterable[str], grace_s: float = 10.0) -> None:
        chosen = [(n, self.started[n]) for n in names if n in self.started]
        for _, process in chosen:
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, process in chosen:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for _, process in chosen:
            signal_group(process, signal.SIGKILL)  # the group: pool children too
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)

    def stop_all(self) -> dict[str, int | None]:
        """Web, beat and workers first, the broker last; returns each one's exit status."""
        others = [n for n in reversed(self.started) if n != "redis"]
        self.stop(others)
        self.stop(["redis"], grace_s=5)
        return {n: p.returncode for n, p in self.started.items()}


def signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Any, what: str, timeout_s: float, procs: Processes) -> None:
    """Until ``predicate()``; StackError when time runs out or a child exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        for name, status in procs.exited().items():
            raise StackError(f"{name} exited ({status}) before {what}: "
                             f"{log_tail(procs.logs / f'{name}.log')}")  # fmt: skip
        time.sleep(0.2)
    tails = {n: log_tail(procs.logs / f"{n}.log", 600) for n in procs.started}
    raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}; logs: {tails}")


def log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


# -- Redis -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedisBinary:
    path: str
    env: dict[str, str]
    source: str


def find_redis(explicit: str | None, deb_dir: Path, root: Path) -> RedisBinary:
    """The binary named, else redis-server on PATH, else Debian's packages unpacked."""
    if explicit:
        return RedisBinary(explicit, {}, "--redis-server")
    found = shutil.which("redis-server")
    if found:
        return RedisBinary(found, {}, "PATH")
    debs = sorted(deb_dir.glob("*.deb"))
    if not debs:
        raise StackError(f"no redis-server on PATH and no .deb files in {deb_dir} "
                         "(run bench/device/stack_wheels.sh and carry .deb)")  # fmt: skip
    for deb in debs:
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True, capture_output=True)
    binary = root / "usr" / "bin" / "redis-server"
    if not binary.exists():
        raise StackError(f"{binary} is missing after unpacking {[d.name for d in debs]}")
    libs = [str(d) for d in (root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu")]
    library_path = ":".join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    return RedisBinary(str(binary), {"LD_LIBRARY_PATH": library_path}, f"dpkg -x into {root}")


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(procs: Processes, binary: RedisBinary, tmp: Path) -> tuple[str, str]:
    """(URL, version) of a redis-server without persistence on a free loopback port."""
    port = free_port()
    env = {**os.environ, **binary.env}
    version = subprocess.run(
        [binary.path, "--version"], env=env, capture_output=True, text=True, timeout=10
    )
    if version.returncode != 0:
        raise StackError(f"{binary.path} --version failed: {version.stderr.strip()[-500:]}")
    argv = [binary.path, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
            "--appendonly", "no", "--dir", str(tmp)]  # fmt: skip
    procs.start("redis", argv, env)
    wait_for(lambda: redis_answers(port), "Redis to answer PING", 20, procs)
    return f"redis://127.0.0.1:{port}/0", version.stdout.strip()


# -- the Django app ----------------------------------------------------------------------------
def app_env(opts: Options, tmp: Path, redis_url: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "STATIC_ROOT": str(tmp / "static"),
        "LOG_LEVEL": "INFO",
        "GEMMFORGE_EXECUTOR": opts.executor,
        "GEMMFORGE_BATCH_SIZE": str(opts.batch),
        "GEMMFORGE_GPU_DEVICE": str(opts.gpu_index),
        "GEMMFORGE_VERIFY_JOBS": str(opts.verify_jobs),
        "GEMMFORGE_DEVICE_SECONDS": str(opts.device_seconds),
        "WORK_LEASE_SECONDS": str(LEASE_SECONDS),
        "WORK_REQUEUE_SECONDS": "5",  # queued campaigns start within 5 s
        "WORKER_HEARTBEAT_SECONDS": "5",
        "LAUNCH_RATE_LIMIT": "20",
    }
    if opts.replay:
        env["GEMMFORGE_EXECUTION_LOG"] = str(tmp / "executions.log")
        env["GEMMFORGE_REPLAY_DELAY_MS"] = str(opts.replay_delay_ms)
    return env


def manage(env: dict[str, str], *args: str, timeout_s: float = 300) -> str:
    ran = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if ran.returncode != 0:
        raise StackError(f"manage.py {' '.join(args)} failed ({ran.returncode}): "
                         f"{(ran.stdout + ran.stderr)[-2000:]}")  # fmt: skip
    return ran.stdout


def django_setup(env: dict[str, str]) -> None:
    """This process reads the same database (workers and web write it)."""
    os.environ.update(env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


@dataclass(frozen=True)
class Worker:
    name: str  # log and process name
    hostname: str  # Celery node name
    queues: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict, hash=False)


def plan_workers(opts: Options) -> list[Worker]:
    from engine.config import COMPILE_JOBS_VARIABLE

    cpus = os.cpu_count() or 1
    jobs = str(max(1, cpus // opts.compile_workers))  # nvcc processes per compile step
    workers = [Worker("default", "default@stack", ("default",))]
    workers += [
        Worker(f"compile{i}", f"compile{i}@stack", ("compile",), {COMPILE_JOBS_VARIABLE: jobs})
        for i in range(opts.compile_workers)
    ]
    for i in range(opts.gpu_workers):
        queue = f"gpu.{SPLIT_POOLS[i]}" if opts.split_queues else "gpu.sm90"
        workers.append(Worker(f"gpu{i}", f"gpu{i}@stack", (queue,)))
    return workers


def start_app(procs: Processes, env: dict[str, str], workers: list[Worker], tmp: Path) -> int:
    """Workers, beat and the web server; returns the web server's port."""
    for w in workers:
        argv = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", ",".join(w.queues),
                "-n", w.hostname, "--concurrency", "1", "--prefetch-multiplier", "1",
                "--without-gossip", "--without-mingle", "--loglevel", "INFO"]  # fmt: skip
        procs.start(w.name, argv, {**env, **w.env})
    beat = [sys.executable, "-m", "celery", "-A", "webapp", "beat",
            "-s", str(tmp / "beat-schedule"), "--loglevel", "INFO"]  # fmt: skip
    procs.start("beat", beat, env)
    port = free_port()
    procs.start("web", web_argv(port), env)
    return port


def web_argv(port: int) -> list[str]:
    """gunicorn as in production; Django's runserver where gunicorn is missing."""
    try:
        import gunicorn  # noqa: F401
    except ImportError:
        return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    return [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", "2", "--access-logfile", "-", "--error-logfile", "-"]  # fmt: skip


def workers_ready(hostnames: Sequence[str]) -> bool:
    from webapp.workers.models import WorkerHeartbeat

    ready = WorkerHeartbeat.objects.filter(hostname__in=hostnames, stopped__isnull=True).count()
    return ready == len(hostnames)


# -- the web -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Response:
    status: int
    seconds: float
    body: str
    url: str


class Web:
    """A browser of sorts: cookies, CSRF tokens, forms."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def request(self, path: str, data: dict[str, str] | None = None) -> Response:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        started = time.monotonic()
        try:
            with self.opener.open(self.base + path, data=body, timeout=30) as r:
                text = r.read().decode(errors="replace")
                return Response(r.status, time.monotonic() - started, text, r.geturl())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            return Response(e.code, time.monotonic() - started, text, e.geturl())

    def get(self, path: str) -> Response:
        return self.request(path)

    def submit(self, path: str, fields: dict[str, str]) -> Response:
        """GET the form for its CSRF token, then POST it."""
        page = self.get(path)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        if page.status != 200 or token is None:
            raise StackError(f"GET {path}: {page.status}, no CSRF token")
        return self.request(path, {**fields, "csrfmiddlewaretoken": token.group(1)})

    def login(self, username: str, password: str) -> None:
        answer = self.submit("/accounts/login/", {"username": username, "password": password})
        if answer.status != 200 or "/accounts/login/" in answer.url:
            raise StackError(f"login as {username} failed ({answer.status} at {answer.url})")


def launch_fields(opts: Options, name: str, shapes: Sequence[str], pool: str) -> dict[str, str]:
    return {
        "name": name,
        "shapes": "\n".join(shapes),
        "layout": opts.layout,
        "budget_per_shape": str(opts.budget),
        "proposer_mix": opts.mix,
        "reward_protocol": "device",
        "gpu_pool": pool,
        "search_space": opts.space,
        "preset": "",
        "tokens": "",
    }


def launch_via_web(web: Web, fields: dict[str, str]) -> int:
    answer = web.submit("/campaigns/new/", fields)
    found = re.search(r"/campaigns/(\d+)/$", answer.url)
    if answer.status != 200 or found is None:
        errors = re.findall(r'<ul class="errorlist[^"]*">(.*?)</ul>', answer.body, re.S)
        raise StackError(f"the launch form answered {answer.status} at {answer.url}: {errors}")
    return int(found.group(1))


def launch_via_service(owner: Any, fields: dict[str, str]) -> int:
    from engine.problem import Problem
    from webapp.campaigns.forms import parse_mix
    from webapp.campaigns.services import campaign_create

    campaign = campaign_create(
        owner=owner,
        name=fields["name"],
        layout=fields["layout"],
        problems=[Problem.parse(s, fields["layout"]) for s in fields["shapes"].split("\n")],
        budget_per_shape=int(fields["budget_per_shape"]),
        proposer_mix=parse_mix(fields["proposer_mix"]),
        reward_protocol=fields["reward_protocol"],
        gpu_pool=fields["gpu_pool"],
        search_space=fields["search_space"],
    )
    return campaign.id


def launch(opts: Options, web: Web, owner: Any, report: dict[str, Any]) -> list[int]:
    """The campaigns (one; --split-queues: one per shape and pool) through the launch form, or
    through the service behind it when the form fails (the error is reported)."""
    if opts.split_queues:
        plans = [(f"stack split {s} gpu.{pool}", [s], pool)
                 for s, pool in zip(opts.shapes, SPLIT_POOLS, strict=True)]  # fmt: skip
    else:
        plans = [(f"stack {','.join(opts.shapes)}", opts.shapes, "")]
    ids = []
    for name, shapes, pool in plans:
        fields = launch_fields(opts, name, shapes, pool)
        try:
            ids.append(launch_via_web(web, fields))
            report["launch"]["via"].append("web form")
        except (StackError, OSError) as exc:
            report["launch"]["web_errors"].append(str(exc))
            ids.append(launch_via_service(owner, fields))
            report["launch"]["via"].append("service (the form failed)")
    return ids


class WebProbe(threading.Thread):
    """GETs the dashboard, the campaign pages, progress.json and the workers page now and then."""

    def __init__(self, web: Web, campaign_ids: Sequence[int]) -> None:
        super().__init__(name="web-probe", daemon=True)
        self.web = web
        self.paths = ["/", "/workers/"]
        for cid in campaign_ids:
            self.paths += [f"/campaigns/{cid}/", f"/api/campaigns/{cid}/progress.json"]
        self.results: dict[str, list[tuple[int, float]]] = {p: [] for p in self.paths}
        self.progress: dict[str, Any] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while True:
            self.probe_once()
            if self.stopping.wait(WEB_PROBE_INTERVAL_S):
                return

    def probe_once(self) -> None:
        for path in self.paths:
            try:
                answer = self.web.get(path)
            except OSError:
                self.results[path].append((0, 0.0))
                continue
            self.results[path].append((answer.status, answer.seconds))
            if path.endswith("progress.json") and answer.status == 200:
                with contextlib.suppress(ValueError):
                    self.progress[path] = json.loads(answer.body)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, results in self.results.items():
            times = [s for code, s in results if code == 200]
            out[path] = {
                "requests": len(results),
                "ok": len(times),
                "statuses": dict(Counter(str(code) for code, _ in results)),
                "median_ms": round(1000 * statistics.median(times), 1) if times else None,
                "max_ms": round(1000 * max(times), 1) if times else None,
            }
        return out


# -- the GPU's utilisation ---------------------------------------------------------------------
class GpuSampler(threading.Thread):
    """utilization.gpu every SAMPLE_INTERVAL_S through NVML (nvidia-ml-py), else nvidia-smi.

    ``reason`` says why there are no samples (no GPU, no NVML, the replay executor)."""

    def __init__(self, index: int) -> None:
        super().__init__(name="gpu-sampler", daemon=True)
        self.index = index
        self.samples: list[tuple[float, int]] = []
        self.source = ""
        self.reason = ""
        self.stopping = threading.Event()
        self._smi: subprocess.Popen | None = None

    def run(self) -> None:
        try:
            self.sample_nvml()
        except Exception as nvml_error:
            self.samples.clear()
            try:
                self.sample_smi()
            except Exception as smi_error:
                self.reason = f"NVML: {nvml_error}; nvidia-smi: {smi_error}"

    def sample_nvml(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self.source = "nvml"
            while not self.stopping.is_set():
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                self.samples.append((time.time(), int(rates.gpu)))
                self.stopping.wait(SAMPLE_INTERVAL_S)
        finally:
            pynvml.nvmlShutdown()

    def sample_smi(self) -> None:
        if shutil.which("nvidia-smi") is None:
            raise StackError("nvidia-smi is not on PATH")
        every_ms = int(SAMPLE_INTERVAL_S * 1000)
        argv = ["nvidia-smi", f"--id={self.index}", "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits", f"-lms={every_ms}"]  # fmt: skip
        pipe = subprocess.PIPE
        self._smi = subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True)
        self.source = "nvidia-smi"
        assert self._smi.stdout is not None
        for line in self._smi.stdout:
            if line.strip().isdigit():
                self.samples.append((time.time(), int(line.strip())))
            if self.stopping.is_set():
                break
        if not self.samples:
            raise StackError(f"nvidia-smi gave no samples: {self._smi.stderr.read()[-300:]}")

    def stop(self) -> None:
        self.stopping.set()
        if self._smi is not None and self._smi.poll() is None:
            self._smi.terminate()
        self.join(5)


def busy_fraction(samples: Sequence[tuple[float, int]], start: float, end: float) -> dict:
    """Mean utilisation (0–1) of the samples in [start, end], and the share of busy samples."""
    window = [u for t, u in samples if start <= t <= end]
    if not window:
        return {"busy_fraction": None, "samples": 0, "reason": "no samples in this window"}
    return {
        "busy_fraction": round(sum(window) / (100 * len(window)), 4),
        "busy_samples_fraction": round(sum(u > 0 for u in window) / len(window), 4),
        "samples": len(window),
        "seconds": round(end - start, 1),
    }


# -- watching the work -------------------------------------------------------------------------
class Timeline:
    """Each work item's start and end, from polling the database (the claim time is read back
    from its lease, which the claim set to now + WORK_LEASE_SECONDS)."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.last_poll = time.time()

    def observe(self, rows: Iterable[dict[str, Any]], now: float) -> None:
        for row in rows:
            step = self.steps.setdefault(row["id"], new_step(row))
            step.update(status=row["status"], worker=row["worker"], attempts=row["attempts"])
            if row["status"] == "running" and "started" not in step:
                lease = row["lease_expires"]
                step["started"] = lease.timestamp() - LEASE_SECONDS if lease else now
            if row["status"] in ("done", "failed") and "finished" not in step:
                step["finished"] = row["updated"].timestamp()
                step["result"] = row["result"]
                if "started" not in step:  # ran between two polls
                    step["started"] = min(self.last_poll, step["finished"])
                    step["start_estimated"] = True
        self.last_poll = now

    def finished(self, kind: str | None = None) -> list[dict[str, Any]]:
        return sorted(
            (s for s in self.steps.values() if "finished" in s and kind in (None, s["kind"])),
            key=lambda s: s["finished"],
        )


def new_step(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "kind": row["kind"],
        "round": row["round"],
        "problem": row["problem_id"],
        "queue": row["queue"],
        "campaign": row["campaign_id"],
    }


def work_rows(campaign_ids: Sequence[int]) -> list[dict[str, Any]]:
    from webapp.campaigns.models import WorkItem

    fields = ("id", "kind", "round", "problem_id", "campaign_id", "queue", "status", "worker",
              "attempts", "lease_expires", "updated", "result")  # fmt: skip
    return list(WorkItem.objects.filter(campaign_id__in=campaign_ids).values(*fields))


def campaign_statuses(campaign_ids: Sequence[int]) -> dict[int, str]:
    from webapp.campaigns.models import Campaign

    return dict(Campaign.objects.filter(id__in=campaign_ids).values_list("id", "status"))


def union_seconds(intervals: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] covered by at least one interval."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if b > start and a < end)
    total, reach = 0.0, start
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


# -- what came out -----------------------------------------------------------------------------
def candidates_summary(campaign_ids: Sequence[int], executions: Path | None) -> dict[str, Any]:
    from webapp.campaigns.models import Candidate

    rows = list(
        Candidate.objects.filter(problem__campaign_id__in=campaign_ids).values_list(
            "problem__m", "problem__n", "problem__k", "problem__layout", "name", "status",
            "outcome__status",
        )
    )  # fmt: skip
    keys = [f"{m}x{n}x{k}_{layout} {name}" for m, n, k, layout, name, *_ in rows]
    outcomes = Counter(o for *_, o in rows if o is not None)
    summary: dict[str, Any] = {
        "total": len(rows),
        "recorded": sum(o is not None for *_, o in rows),
        "waiting_for_gpu": sum(o is None for *_, o in rows),
        "verified": outcomes.get("ok", 0),
        "rejected": outcomes.get("rejected", 0),
        "failed": sum(v for k, v in outcomes.items() if k not in ("ok", "rejected")),
        "outcomes": dict(outcomes),
        "statuses": dict(Counter(s for *_, s, _ in rows)),
        "stored_twice": sorted(k for k, n in Counter(keys).items() if n > 1),
    }
    if executions is not None and executions.exists():
        lines = [x for x in executions.read_text().splitlines() if x and not x.startswith("#")]
        executed = Counter(lines)
        measured = {
            k for k, (*_, o) in zip(keys, rows, strict=True) if o not in (None, "compile_error")
        }
        summary["executions"] = {
            "total": sum(executed.values()),
            "executed_twice": sorted(k for k, n in executed.items() if n > 1),
            "recorded_not_executed": sorted(measured - set(executed)),
            "executed_not_recorded": sorted(set(executed) - measured),
        }
    return summary


def problems_summary(campaign_ids: Sequence[int]) -> list[dict[str, Any]]:
    from django.db.models import Count

    from webapp.campaigns.models import Problem

    rows = (
        Problem.objects.filter(campaign_id__in=campaign_ids)
        .annotate(candidate_count=Count("candidates"))
        .order_by("id")
    )
    return [
        {"campaign": p.campaign_id, "shape": f"{p.shape}_{p.layout}", "status": p.status,
         "stopped": p.stopped, "candidates": p.candidate_count, "best_speedups": p.best_speedups}
        for p in rows
    ]  # fmt: skip


def worker_summary(timeline: Timeline, workers: Sequence[Worker], logs: Path) -> dict[str, Any]:
    """Steps per worker (from the database: who finished each) and tasks per worker log."""
    by_host = {w.hostname: w for w in workers}
    out: dict[str, Any] = {}
    for w in workers:
        done = [s for s in timeline.finished() if s["worker"] == w.hostname]
        text = log_tail(logs / f"{w.name}.log", chars=10**9)
        out[w.hostname] = {
            "queues": list(w.queues),
            "steps": dict(Counter(f"{s['kind']}:{s['status']}" for s in done)),
            "tasks_succeeded": dict(Counter(re.findall(r"tasks\.(\w+)\[[^\]]+\] succeeded", text))),
            "off_queue_steps": [s["id"] for s in done if s["queue"] not in w.queues],
        }
    strangers = {s["worker"] for s in timeline.finished()} - set(by_host)
    if strangers:
        out["unknown"] = sorted(strangers)
    return out


def dashboard_times(campaign_ids: Sequence[int]) -> dict[str, Any]:
    """Campaign id → the times its page and results.json show (webapp.campaigns.selectors)."""
    from django.utils import timezone

    from webapp.campaigns.models import Campaign
    from webapp.campaigns.times import campaign_times

    out: dict[str, Any] = {}
    for campaign in Campaign.objects.filter(id__in=campaign_ids):
        times = campaign_times(campaign=campaign, now=timezone.now())
        out[str(campaign.id)] = times.to_dict() if times else None
    return out


def rate_summary(
    timeline: Timeline, launched: float, ended: float, cand: dict[str, Any]
) -> dict[str, Any]:
    gpu_steps = timeline.finished("gpu")
    hours = max(ended - launched, 1e-9) / 3600
    out: dict[str, Any] = {
        "campaign_seconds": round(ended - launched, 1),
        "candidates_per_hour": round(cand["recorded"] / hours, 1),
        "verified_per_hour": round(cand["verified"] / hours, 1),
    }
    if gpu_steps:
        warm = gpu_steps[0]["finished"]
        after = sum((s.get("result") or {}).get("measured", 0) for s in gpu_steps[1:])
        warm_hours = max(ended - warm, 1e-9) / 3600
        out["warm_from_s"] = round(warm - launched, 1)
        out["warm_measured_per_hour"] = round(after / warm_hours, 1) if ended > warm else None
    return out


def step_report(step: dict[str, Any], launched: float, samples: list) -> dict[str, Any]:
    started, finished = step.get("started"), step.get("finished")
    entry = {k: step.get(k) for k in ("id", "kind", "round", "problem", "queue", "worker",
                                       "status", "attempts", "result")}  # fmt: skip
    if started is not None:
        entry["start_s"] = round(started - launched, 2)
    if started is not None and finished is not None:
        entry["seconds"] = round(finished - started, 2)
        if step["kind"] == "gpu" and samples:
            entry["gpu_busy"] = busy_fraction(samples, started, finished)["busy_fraction"]
    if step.get("start_estimated"):
        entry["start_estimated"] = True
    return entry


def gpu_report(
    opts: Options, sampler: GpuSampler | None, timeline: Timeline, launched: float, ended: float
) -> dict[str, Any]:
    gpu_steps = timeline.finished("gpu")
    intervals = [(s["started"], s["finished"]) for s in gpu_steps]
    out: dict[str, Any] = {
        "target_warm_busy_fraction": BUSY_TARGET,
        "gpu_step_seconds": round(sum(b - a for a, b in intervals), 1),
        # the share of the campaign in which some GPU worker was running a step
        "gpu_worker_occupancy": round(
            union_seconds(intervals, launched, ended) / max(ended - launched, 1e-9), 4
        ),
        "step_phases": phase_report(gpu_steps),
    }
    if opts.gpu_workers > 1:
        out["concurrent_gpu_step_seconds"] = round(
            concurrent_seconds(gpu_steps, launched, ended), 1
        )
        out["note"] = (
            "several GPU workers share one GPU: their steps overlap, so these timings prove "
            "routing and leases, not kernel speed"
        )
    if sampler is None:
        reason = "replay executor: recorded measurements, no GPU is used" if opts.replay else ""
        return {**out, "busy_fraction": None, "reason": reason or "not sampled"}
    samples = list(sampler.samples)
    out["source"] = sampler.source or None
    if not samples:
        return {**out, "busy_fraction": None, "reason": sampler.reason or "no samples"}
    out["overall"] = busy_fraction(samples, launched, ended)
    out["busy_fraction"] = out["overall"]["busy_fraction"]
    if gpu_steps:
        out["warm"] = busy_fraction(samples, gpu_steps[0]["finished"], ended)
        out["warm_busy_fraction"] = out["warm"]["busy_fraction"]
        value = out["warm_busy_fraction"]
        out["target_met"] = value is not None and value >= BUSY_TARGET
    else:
        out["warm"] = {"busy_fraction": None, "reason": "no GPU step finished"}
    return out


def phase_report(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where the GPU steps' time went: each step's result holds ``phases_s`` (engine.timing.phases,
    booked by the runner and its child; they add up to the step's wall time in the worker),
    summed here over every finished GPU step and over the warm ones (after the first).
    ``unaccounted`` is the timeline's step time (claim to done, as polled) beyond the phases:
    the lease claim, Celery and the polling's resolution."""

    def totals(chosen: Sequence[dict[str, Any]]) -> dict[str, Any]:
        timed = [s for s in chosen if (s.get("result") or {}).get("phases_s")]
        if not timed:
            return {"steps": 0}
        seconds: dict[str, float] = {}
        for step in timed:
            for name, value in step["result"]["phases_s"].items():
                seconds[name] = seconds.get(name, 0.0) + float(value)
        booked = sum(seconds.values())
        wall = sum(s["finished"] - s["started"] for s in timed)
        seconds["unaccounted"] = max(0.0, wall - booked)
        whole = max(wall, booked, 1e-9)
        return {
            "steps": len(timed),
            "step_seconds": round(wall, 2),
            "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "share": {k: round(v / whole, 4) for k, v in seconds.items()},
            "per_step_s": {k: round(v / len(timed), 2) for k, v in seconds.items()},
        }

    out = {"all": totals(steps), "warm": totals(steps[1:])}
    info = [(s.get("result") or {}).get("info") for s in steps]
    info = [i for i in info if i]
    if info:
        out["info"] = {
            "autotune_cached": [i.get("autotune_cached") for i in info],
            "verification_wall_s": [i.get("verification_wall_s") for i in info],
            "verification_warm": [i.get("verification_warm") for i in info],
            # [min, median, max] over each step's verification children
            "verification_start_s": [i.get("verification_start_s") for i in info],
            "verification_cuda_init_s": [i.get("verification_cuda_init_s") for i in info],
            "verification_warm_s": [i.get("verification_warm_s") for i in info],
            "verification_session_s": [i.get("verification_session_s") for i in info],
            "verification_checks_s": [i.get("verification_checks_s") for i in info],
            "heat_up_ran_s": [i.get("heat_up_ran_s") for i in info],
            "health_probe": dict(Counter(str(i.get("health_probe")) for i in info)),
        }
    return out


def concurrent_seconds(steps: Sequence[dict[str, Any]], start: float, end: float) -> float:
    """Seconds in which GPU steps of two or more workers ran at once."""
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for s in steps:
        by_worker.setdefault(s["worker"], []).append((s["started"], s["finished"]))
    alone = sum(union_seconds(spans, start, end) for spans in by_worker.values())
    together = union_seconds([x for spans in by_worker.values() for x in spans], start, end)
    return alone - together


def write_samples(path: Path, samples: Sequence[tuple[float, int]], launched: float) -> None:
    lines = ["seconds_since_launch,utilization_gpu"]
    lines += [f"{t - launched:.2f},{u}" for t, u in samples]
    path.write_text("\n".join(lines) + "\n")


def environment(opts: Options, cache_entries: int | None) -> dict[str, Any]:
    from importlib import metadata

    from engine import config

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def command(argv: list[str]) -> str | None:
        try:
            ran = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable: {exc}"
        return (ran.stdout.strip() or ran.stderr.strip())[-600:]

    packages = ("Django", "celery", "kombu", "redis", "gunicorn", "torch", "nvidia-ml-py")
    query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm"
    smi = ["nvidia-smi", f"--id={opts.gpu_index}", "--format=csv,noheader", query]
    engine = config.load()
    return {
        "host": platform.node(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "packages": {name: version(name) for name in packages},
        "gpu": command(smi) if shutil.which("nvidia-smi") else None,
        "nvcc": command(["nvcc", "--version"]) if shutil.which("nvcc") else None,
        "git": command(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "engine_cache_dir": str(engine.cache_dir),
        "kernel_cache_entries_at_start": cache_entries,
        "verify_mps": config.switch_value(engine.verify_mps),
        "verify_warm": str(engine.verify_warm),
        "heat_while_verifying": config.switch_value(engine.heat_while_verifying),
        "verify_busy_stream": str(engine.verify_busy_stream),
    }


def kernel_cache_entries() -> int | None:
    from engine import config

    kernels = config.load().kernel_cache
    if not kernels.is_dir():
        return 0
    return sum(1 for _ in kernels.glob("*/*/result.json"))


def collect_logs(logs: Path, out: Path, budget: int = LOG_BUDGET_BYTES) -> None:
    """Every log into one file; a long one keeps its head (start-up errors) and its tail."""
    files = sorted(logs.glob("*.log"))
    share = budget // max(1, len(files))
    with out.open("w") as sink:
        for path in files:
            text = path.read_text(errors="replace")
            if len(text) > share:
                head, tail = share // 5, share - share // 5
                cut = f"\n[... {len(text) - share} characters cut ...]\n"
                text = text[:head] + cut + text[-tail:]
            sink.write(f"===== {path.name} =====\n{text}\n")


def copy_database(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def write_report(opts: Options, report: dict[str, Any]) -> None:
    opts.out.mkdir(parents=True, exist_ok=True)
    tmp = opts.out / "stack.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(opts.out / "stack.json")


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Run:
    """What the run holds, so that the finally clause can report and clean up."""

    opts: Options
    tmp: Path
    procs: Processes
    workers: list[Worker] = field(default_factory=list)
    campaign_ids: list[int] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    sampler: GpuSampler | None = None
    probe: WebProbe | None = None
    launched: float | None = None
    ended: float | None = None
    django_ready: bool = False


def run(state: Run, report: dict[str, Any]) -> None:
    opts, tmp, procs = state.opts, state.tmp, state.procs
    t0 = time.time()
    phases: dict[str, float] = report["phases_s"]
    binary = find_redis(opts.redis_server, opts.deb_dir, Path(tempfile.gettempdir()) / "redis-root")
    redis_url, redis_version = start_redis(procs, binary, tmp)
    report["redis"] = {"binary": binary.path, "source": binary.source, "version": redis_version}
    env = app_env(opts, tmp, redis_url)
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput", "-v0")
    phases["setup"] = round(time.time() - t0, 1)
    django_setup(env)
    state.django_ready = True
    report["environment"] = environment(opts, kernel_cache_entries())
    state.workers = plan_workers(opts)
    port = start_app(procs, env, state.workers, tmp)
    web = Web(f"http://127.0.0.1:{port}")
    wait_for(lambda: web_answers(web), "the web server", 90, procs)
    hostnames = [w.hostname for w in state.workers]
    wait_for(lambda: workers_ready(hostnames), "every worker's first heartbeat", 180, procs)
    phases["start_processes"] = round(time.time() - t0 - phases["setup"], 1)

    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(16)
    owner = get_user_model().objects.create_user("stack", password=password)
    web.login("stack", password)
    if not opts.replay:
        state.sampler = GpuSampler(opts.gpu_index)
        state.sampler.start()
    state.launched = time.time()
    state.campaign_ids = launch(opts, web, owner, report)
    report["campaigns"] = state.campaign_ids
    state.probe = WebProbe(web, state.campaign_ids)
    state.probe.start()
    watch(state, report)


def web_answers(web: Web) -> bool:
    try:
        return web.get("/").status == 200
    except OSError:
        return False


def watch(state: Run, report: dict[str, Any]) -> None:
    """Poll the work items until every campaign ended or the deadline passed."""
    assert state.launched is not None
    deadline = state.launched + state.opts.deadline_s
    next_report = time.time() + REPORT_EVERY_S
    while True:
        now = time.time()
        state.timeline.observe(work_rows(state.campaign_ids), now)
        statuses = campaign_statuses(state.campaign_ids)
        report["campaign_status"] = statuses
        if statuses and all(s in FINISHED for s in statuses.values()):
            state.ended = max((s["finished"] for s in state.timeline.finished()), default=now)
            report["outcome"] = "finished"
            return
        if now >= deadline:
            state.ended = now
            report["outcome"] = f"deadline: still running after {state.opts.deadline_s:.0f} s"
            pause(state.campaign_ids)
            return
        if now >= next_report:
            report["progress_s"] = round(now - state.launched, 1)
            report["steps_finished"] = len(state.timeline.finished())
            write_report(state.opts, report)
            next_report = now + REPORT_EVERY_S
        time.sleep(POLL_INTERVAL_S)


def pause(campaign_ids: Sequence[int]) -> None:
    from webapp.campaigns.services import CampaignControlError, campaign_control

    for cid in campaign_ids:
        with contextlib.suppress(CampaignControlError):
            campaign_control(campaign_id=cid, action="pause")


def finish(state: Run, report: dict[str, Any]) -> None:
    """Stop everything, then fill in the results (the database outlives its writers)."""
    opts = state.opts
    if state.probe is not None:
        state.probe.stopping.set()
        state.probe.join(40)
        report["web"] = state.probe.summary()
        report["web"]["progress"] = state.probe.progress
    if state.sampler is not None:
        state.sampler.stop()
    report["process_exits"] = state.procs.exited()
    t = time.time()
    report["exit_status"] = state.procs.stop_all()
    report["phases_s"]["shutdown"] = round(time.time() - t, 1)
    if state.django_ready and state.campaign_ids and state.launched is not None:
        summarize(state, report)
    opts.out.mkdir(parents=True, exist_ok=True)
    collect_logs(state.procs.logs, opts.out / "stack-logs.txt")
    if (state.tmp / "db.sqlite3").exists():
        with contextlib.suppress(sqlite3.Error):
            copy_database(state.tmp / "db.sqlite3", opts.out / "stack-db.sqlite3")


def summarize(state: Run, report: dict[str, Any]) -> None:
    opts, launched = state.opts, state.launched
    assert launched is not None
    from django.db import connection

    connection.close()
    state.timeline.observe(work_rows(state.campaign_ids), time.time())
    ended = state.ended or time.time()
    executions = state.tmp / "executions.log" if opts.replay else None
    cand = candidates_summary(state.campaign_ids, executions)
    report["campaign_status"] = campaign_statuses(state.campaign_ids)
    report["problems"] = problems_summary(state.campaign_ids)
    report["candidates"] = cand
    report["rate"] = rate_summary(state.timeline, launched, ended, cand)
    report["gpu"] = gpu_report(opts, state.sampler, state.timeline, launched, ended)
    # what the campaign page says its user waited for, beside NVML's samples above
    report["dashboard_times"] = dashboard_times(state.campaign_ids)
    report["workers"] = worker_summary(state.timeline, state.workers, state.procs.logs)
    samples = list(state.sampler.samples) if state.sampler else []
    report["steps"] = [step_report(s, launched, samples) for s in state.timeline.steps.values()]
    report["kernel_cache_entries_at_end"] = kernel_cache_entries()
    if samples:
        write_samples(opts.out / "stack-gpu.csv", samples, launched)
    report["checks"] = checks(state, report)


def checks(state: Run, report: dict[str, Any]) -> dict[str, Any]:
    cand = report["candidates"]
    steps = state.timeline.finished()
    pages = {k: v for k, v in report.get("web", {}).items() if k != "progress"}
    out: dict[str, Any] = {
        "campaigns_done": all(s == "done" for s in report["campaign_status"].values()),
        "every_candidate_recorded": cand["total"] > 0 and cand["waiting_for_gpu"] == 0,
        "no_candidate_stored_twice": not cand["stored_twice"],
        "every_step_claimed_once": all(s.get("attempts") == 1 for s in steps),
        "web_live": bool(pages) and all(0 < v["ok"] == v["requests"] for v in pages.values()),
        "workers_stayed_up": not report.get("process_exits"),
    }
    if "executions" in cand:
        e = cand["executions"]
        out["no_candidate_executed_twice"] = not e["executed_twice"]
        out["executions_match_records"] = not (
            e["recorded_not_executed"] or e["executed_not_recorded"]
        )
    if state.opts.gpu_workers > 1:
        gpu = [w for w in state.workers if w.name.startswith("gpu")]
        ran = {w.hostname: report["workers"][w.hostname]["steps"] for w in gpu}
        out["every_gpu_worker_ran_steps"] = all(ran.values())
        out["gpu_steps_stayed_on_their_queue"] = not any(
            report["workers"][w.hostname]["off_queue_steps"] for w in gpu
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gemmforge-stack-"))
    (tmp / "logs").mkdir()
    report: dict[str, Any] = {
        "ok": False,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(opts).items()},
        "phases_s": {},
        "launch": {"via": [], "web_errors": []},
    }
    state = Run(opts, tmp, Processes(tmp / "logs"))

    def interrupted(signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    try:
        write_report(opts, report)
        run(state, report)
    except (Exception, Interrupted) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-4000:]
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            finish(state, report)
        except Exception as exc:  # the report is written whatever broke here
            report.setdefault("error", f"while finishing: {type(exc).__name__}: {exc}")
            report["finish_traceback"] = traceback.format_exc()[-4000:]
        passed = report.get("checks") or {"checks": False}
        report["ok"] = "error" not in report and all(passed.values())
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_report(opts, report)
        if not opts.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print_summary(report, opts.out)
    return 0 if report["ok"] else 1


def print_summary(report: dict[str, Any], out: Path) -> None:
    gpu, rate, cand = report.get("gpu", {}), report.get("rate", {}), report.get("candidates", {})
    print(f"stack run: {report.get('outcome', 'did not finish')}; campaigns "
          f"{report.get('campaign_status')}")  # fmt: skip
    if cand:
        print(f"candidates: {cand['recorded']} recorded, {cand['verified']} verified, "
              f"{cand['failed']} failed, {cand['rejected']} rejected; "
              f"{rate.get('candidates_per_hour')} per hour")  # fmt: skip
    if gpu:
        print(f"GPU busy: overall {gpu.get('busy_fraction')}, warm {gpu.get('warm_busy_fraction')}"
              f" ({gpu.get('reason') or gpu.get('source')}); GPU-worker occupancy "
              f"{gpu.get('gpu_worker_occupancy')}")  # fmt: skip
        per_step = ((gpu.get("step_phases") or {}).get("all") or {}).get("per_step_s")
        if per_step:
            print("GPU step, mean seconds per phase: "
                  + ", ".join(f"{k} {v}" for k, v in per_step.items()))  # fmt: skip
    for name, passed in report.get("checks", {}).items():
        print(f"  {'ok  ' if passed else 'FAIL'} {name}")
    if "error" in report:
        print(f"error: {report['error']}")
    print(f"report: {out / 'stack.json'}  logs: {out / 'stack-logs.txt'}")


if __name__ == "__main__":
    sys.exit(main())
