#!/usr/bin/env python
"""Bounded load test of the dashboard on loopback.

What it does, all on 127.0.0.1 and in a fresh database that it removes afterwards:

1. migrates a new database (a temporary SQLite file, or with --postgres a new PostgreSQL database
   gemmforge_load_<pid> on that server), imports the recorded H200 run (manage.py import_results)
   and builds the synthetic campaign (manage.py make_fixture_campaign --candidates N);
2. starts a *writer* process: a campaign in status "running" (the recorded run's 16 shapes) to
   which it adds a batch of candidates (copies of recorded ones) every --write-interval seconds,
   updating the shapes' best speedups, as the campaign runner does: reads race real writes;
3. starts gunicorn (gthread) on a free port and runs wrk with --connections connections for
   --duration seconds over the list, campaign, shape and candidate pages and the JSON endpoints
   (round robin through --paths URLs, see paths()); wrk's latency is per request, from its
   HdrHistogram;
4. writes results.json and README.md to --out (default bench/results/<date>-load/).

Needs wrk (apt-get install wrk). Not part of the test suite: it takes a minute and its numbers
depend on the machine; tests/webapp/test_load_script.py only checks its argument parsing.

    .venv/bin/python bench/stack/load_test.py --postgres postgres://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED_RUN = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
OWNER = "loadtest"
RUNNING_NAME = "LOAD TEST: running campaign (written to during the test)"

WRK_SCRIPT = r"""
local paths = {}
for line in io.lines(os.getenv("LOAD_PATHS")) do paths[#paths + 1] = line end
local counter = 0
statuses = {}  -- a global: done() reads it from each thread
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counter = math.random(#paths)
end

function request()
  counter = counter % #paths + 1
  return wrk.format("GET", paths[counter])
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local codes = {}
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for code, n in pairs(s) do codes[tostring(code)] = (codes[tostring(code)] or 0) + n end
  end
  local parts = {}
  for code, n in pairs(codes) do parts[#parts + 1] = string.format('"%s": %d', code, n) end
  io.write("WRK_JSON ", string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"min": %d, "mean": %.1f, "max": %d, "p50": %d, "p90": %d, "p95": %d, ' ..
    '"p99": %d, "p99.9": %d}, "statuses": {%s}}',
    summary.requests, summary.duration, summary.bytes,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.status,
    summary.errors.timeout,
    latency.min, latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(95), latency:percentile(99), latency:percentile(99.9),
    table.concat(parts, ", ")), "\n")
end
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--connections", type=int, default=50, help="concurrent users (default 50)")
    p.add_argument("--duration", type=int, default=30, help="seconds of load (default 30)")
    p.add_argument("--wrk-threads", type=int, default=2)
    p.add_argument("--timeout", type=int, default=10, help="wrk's per-request timeout, s")
    p.add_argument("--candidates", type=int, default=10000, help="synthetic campaign size")
    p.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    p.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker")
    p.add_argument("--paths", type=int, default=200, help="distinct URLs to cycle through")
    p.add_argument("--write-interval", type=float, default=0.5, help="writer: s between batches")
    p.add_argument("--write-batch", type=int, default=8, help="writer: candidates per batch")
    p.add_argument(
        "--postgres",
        metavar="URL",
        help="a PostgreSQL server (any database on it) where a temporary database is made; "
        "default: a temporary SQLite file",
    )
    p.add_argument("--out", type=Path, default=None, help="default bench/results/<date>-load")
    p.add_argument("--writer", metavar="STOPFILE", help=argparse.SUPPRESS)  # internal
    args = p.parse_args(argv)
    for name in ("connections", "duration", "wrk_threads", "timeout", "workers", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.candidates < 0 or args.paths < 1 or args.write_batch < 1 or args.write_interval <= 0:
        p.error("--candidates ≥ 0, --paths ≥ 1, --write-batch ≥ 1, --write-interval > 0")
    if args.wrk_threads > args.connections:
        p.error("--wrk-threads must not exceed --connections")
    if args.postgres and not args.postgres.startswith(("postgres://", "postgresql://")):
        p.error("--postgres must be a postgres:// URL")
    if args.out is None:
        args.out = ROOT / "bench" / "results" / f"{dt.date.today().isoformat()}-load"
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def writer(stop_file: str) -> None:
    """The background writer (a process of its own): a running campaign that keeps growing."""
    django_setup()
    from django.db import transaction

    from webapp.campaigns.models import Campaign, Candidate, Problem

    source = Campaign.objects.exclude(name__startswith="SYNTHETIC").exclude(name=RUNNING_NAME)
    source = source.order_by("id").first()
    campaign = Campaign.objects.create(
        name=RUNNING_NAME,
        owner=source.owner,
        status=Campaign.Status.RUNNING,
        layout=source.layout,
        budget_per_shape=4096,
        proposer_mix={"rl": 0.5, "evolve": 0.3, "random": 0.2},
        reward_protocol=source.reward_protocol,
    )
    pools = []
    for original in source.problems.order_by("id"):
        problem = Problem.objects.create(
            campaign=campaign,
            m=original.m,
            n=original.n,
            k=original.k,
            layout=original.layout,
            status=Problem.Status.RUNNING,
            best_speedups={},
        )
        pools.append((problem, original, list(original.candidates.order_by("id"))))
    rng = random.Random(10)
    interval = float(os.environ["LOAD_WRITE_INTERVAL"])
    size = int(os.environ["LOAD_WRITE_BATCH"])
    written = batches = 0
    while not os.path.exists(stop_file):
        problem, original, pool = pools[batches % len(pools)]
        picks = [rng.choice(pool) for _ in range(size)]
        with transaction.atomic():
            Candidate.objects.bulk_create(
                Candidate(
                    problem=problem,
                    name=f"{p.name}~w{written + i}",
                    family=p.family,
                    config=p.config,
                    source=p.source,
                    source_hash=f"w{written + i}",
                    proposer="rl",
                    compile_status=p.compile_status,
                    compile_result=p.compile_result,
                    verification_result=p.verification_result,
                    timings=p.timings,
                    reward=p.reward,
                    status=p.status,
                    failure_reason=p.failure_reason,
                )
                for i, p in enumerate(picks)
            )
            problem.best_speedups = original.best_speedups
            problem.save(update_fields=["best_speedups"])
        written += size
        batches += 1
        time.sleep(interval)
    Path(stop_file).write_text(
        json.dumps({"candidates": written, "batches": batches, "campaign_id": campaign.id})
    )


def paths(count: int, seed: int = 1) -> list[str]:
    """A mix of the dashboard's reads, resolved against the database (run inside Django)."""
    from webapp.campaigns.models import Campaign, Candidate, Problem

    rng = random.Random(seed)
    campaigns = list(Campaign.objects.order_by("id").values_list("id", flat=True))
    problems = list(Problem.objects.order_by("id").values_list("id", "campaign_id"))
    candidate_ids = list(Candidate.objects.order_by("id").values_list("id", flat=True))
    kinds = {
        "list": lambda: rng.choice(["/", "/?page=1"]),
        "campaign": lambda: f"/campaigns/{rng.choice(campaigns)}/",
        "shape": lambda: (
            f"/shapes/{rng.choice(problems)[0]}/"
            + rng.choice(["", "?sort=time", "?sort=name", "?page=2", "?status=done"])
        ),
        "candidate": lambda: f"/candidates/{rng.choice(candidate_ids)}/",
        "json": lambda: rng.choice(
            [
                f"/api/campaigns/{rng.choice(campaigns)}/speedups.json",
                f"/api/campaigns/{rng.choice(campaigns)}/progress.json",
                f"/api/campaigns/{rng.choice(campaigns)}/heatmap.json",
                f"/api/shapes/{rng.choice(problems)[0]}/rewards.json",
            ]
        ),
    }
    order = list(kinds)
    return [kinds[order[i % len(order)]]() for i in range(count)]


def wait_for(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("gunicorn exited; see its log")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    sys.exit(f"{url} did not answer within {seconds} s")


def readme(report: dict) -> str:
    r, lat, load = report["results"], report["results"]["latency_ms"], report["load"]
    server, data, machine = report["server"], report["data"], report["machine"]
    statuses = ", ".join(f"{c}: {n}" for c, n in sorted(r["statuses"].items()))
    return f"""# Dashboard load test, {report["date"][:10]}

`bench/stack/load_test.py` (issue 10, item 4): {load["connections"]} concurrent connections (wrk, \
{load["wrk_threads"]} threads) for {load["duration_s"]} s against gunicorn on 127.0.0.1 \
({server["gunicorn_workers"]} workers × {server["threads_per_worker"]} threads, gthread), \
{server["database"]}, while a campaign runs: a background process (the script's writer, not \
a Celery worker) adds {data["writer"]["batch"]} candidates to a `running` campaign every \
{data["writer"]["interval_s"]} s and updates its shapes' best speedups \
({data["writer"]["candidates"]} candidates in {data["writer"]["batches"]} transactions during \
the test, warm-up included).

Data: the recorded H200 run (`{data["recorded_run"]}`, imported with `manage.py \
import_results`) and `manage.py make_fixture_campaign --candidates {data["synthetic_candidates"]}`.
Requests cycle through {load["distinct_urls"]} URLs: {load["mix"]}.

**Machine: {machine["cpus"]} CPU cores, shared by the server, wrk, the writer and the \
database.** The numbers measure this small machine, not the dashboard's ceiling: the server is \
CPU-bound, so latency is mostly queueing behind {load["connections"]} connections.

| | |
| --- | --- |
| requests | {r["requests"]} ({r["requests_per_s"]} /s) |
| latency p50 | {lat["p50"]} ms |
| latency p95 | **{lat["p95"]} ms** |
| latency p99 | {lat["p99"]} ms |
| latency max | {lat["max"]} ms |
| errors (connect/read/write/timeout) | {r["errors"]["connect"]}/{r["errors"]["read"]}/\
{r["errors"]["write"]}/{r["errors"]["timeout"]} |
| non-2xx responses | **{r["non_2xx"]}** (statuses: {statuses}) |

Other work on the machine: 1-minute load average {machine.get("load_average_before", "?")} \
before, {machine.get("load_average_after", "?")} after (the machine has {machine["cpus"]} cores).

Versions: {", ".join(f"{k} {v}" for k, v in report.get("versions", {}).items())}.

Latency is per request (wrk's HdrHistogram, from send to the last byte; wrk does not correct for
coordinated omission here). Raw numbers: `results.json`. Reproduce:

```sh
apt-get install wrk
.venv/bin/python bench/stack/load_test.py --postgres postgres://postgres@127.0.0.1:5432/postgres
```
"""


def versions(wrk: str, postgres: str | None) -> dict[str, str]:
    """What produced the numbers: this checkout, the server stack, the load tool."""
    from importlib.metadata import version

    def out(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=ROOT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({exc})"
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[0] if lines else ""

    found = {
        "gemmforge_commit": out(["git", "rev-parse", "HEAD"]),
        "python": platform.python_version(),
        **{name: version(name) for name in ("Django", "gunicorn", "psycopg", "whitenoise")},
        "wrk": out([wrk, "-v"]),
    }
    if postgres:
        import psycopg

        with psycopg.connect(postgres) as conn:
            found["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.writer:
        writer(args.writer)
        return 0
    wrk = shutil.which("wrk")
    if not wrk:
        sys.exit("wrk is not installed: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="gemmforge-load-"))
    load_before = os.getloadavg()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "STATIC_ROOT": str(work / "static"),
        "LOG_LEVEL": "WARNING",
        "LOAD_WRITE_INTERVAL": str(args.write_interval),
        "LOAD_WRITE_BATCH": str(args.write_batch),
    }
    database = "sqlite (temporary file, WAL)"
    dbname = None
    if args.postgres:
        import psycopg

        dbname = f"gemmforge_load_{os.getpid()}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {dbname}")
        base = args.postgres.rsplit("/", 1)[0]
        env["DATABASE_URL"] = f"{base}/{dbname}"
        database = "PostgreSQL (temporary database on 127.0.0.1)"
    else:
        env["DATABASE_URL"] = f"sqlite:///{work / 'db.sqlite3'}"
    procs: list[subprocess.Popen] = []
    stop_file = work / "stop-writer"
    try:
        print(f"[load] preparing the database in {database}", flush=True)
        manage(env, "migrate", "--noinput")
        manage(env, "collectstatic", "--noinput", "-v0")
        manage(env, "import_results", str(RECORDED_RUN), "--owner", OWNER)
        manage(env, "make_fixture_campaign", "--candidates", str(args.candidates), "--owner", OWNER)
        os.environ.update(
            {
                k: env[k]
                for k in (
                    "DJANGO_SETTINGS_MODULE",
                    "DATABASE_URL",
                    "SECRET_KEY",
                    "STATIC_ROOT",
                    "ALLOWED_HOSTS",
                )
            }
        )
        django_setup()
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--writer", str(stop_file)], cwd=ROOT, env=env
            )
        )
        from webapp.campaigns.models import Campaign

        deadline = time.monotonic() + 60
        while not Campaign.objects.filter(name=RUNNING_NAME).exists():
            if procs[0].poll() is not None or time.monotonic() > deadline:
                sys.exit("the writer did not start its campaign")
            time.sleep(0.2)
        urls = paths(args.paths)
        (work / "paths.txt").write_text("\n".join(urls) + "\n")
        (work / "load.lua").write_text(WRK_SCRIPT)

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(work / "gunicorn.log", "w")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "webapp.wsgi",
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--workers",
                    str(args.workers),
                    "--threads",
                    str(args.threads),
                    "--worker-class",
                    "gthread",
                    "--timeout",
                    "60",
                    "--error-logfile",
                    "-",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        wait_for(base + "/", procs[-1])
        for url in urls:  # warm up: every URL once (compiles templates, fills caches)
            urllib.request.urlopen(base + url, timeout=30).read()
        print(f"[load] wrk: {args.connections} connections, {args.duration} s, {base}", flush=True)
        result = subprocess.run(
            [
                wrk,
                "-t",
                str(args.wrk_threads),
                "-c",
                str(args.connections),
                "-d",
                f"{args.duration}s",
                "--timeout",
                f"{args.timeout}s",
                "--latency",
                "-s",
                str(work / "load.lua"),
                base,
            ],
            env={**env, "LOAD_PATHS": str(work / "paths.txt")},
            capture_output=True,
            text=True,
        )
        if result.returncode or "WRK_JSON" not in result.stdout:
            sys.exit(f"wrk failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        stop_file.write_text("")
        procs[0].wait(timeout=30)
        written = json.loads(stop_file.read_text())
    finally:
        stop_file.touch()
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if dbname:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
    line = next(x for x in result.stdout.splitlines() if x.startswith("WRK_JSON "))
    stats = json.loads(line[len("WRK_JSON ") :])
    errors = sum(stats["errors"].values())
    non_2xx = sum(n for code, n in stats["statuses"].items() if not code.startswith("2"))
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "note": "server, wrk and the writer share these CPUs on loopback",
            # other work on the machine competes for the same CPUs (1-minute load average)
            "load_average_before": round(load_before[0], 2),
            "load_average_after": round(os.getloadavg()[0], 2),
        },
        "versions": versions(wrk, args.postgres),
        "server": {
            "gunicorn_workers": args.workers,
            "threads_per_worker": args.threads,
            "worker_class": "gthread",
            "database": database,
        },
        "load": {
            "tool": "wrk 4.1 (" + wrk + ")",
            "connections": args.connections,
            "wrk_threads": args.wrk_threads,
            "duration_s": args.duration,
            "timeout_s": args.timeout,
            "distinct_urls": len(urls),
            "mix": "list, campaign, shape, candidate pages and JSON endpoints, 1/5 each",
        },
        "data": {
            "recorded_run": str(RECORDED_RUN.relative_to(ROOT)),
            "synthetic_candidates": args.candidates,
            "writer": {**written, "interval_s": args.write_interval, "batch": args.write_batch},
        },
        "results": {
            "requests": stats["requests"],
            "requests_per_s": round(stats["requests"] / (stats["duration_us"] / 1e6), 1),
            "latency_ms": {k: round(v / 1000, 2) for k, v in stats["latency_us"].items()},
            "errors": {**stats["errors"], "total": errors},
            "statuses": stats["statuses"],
            "non_2xx": non_2xx,
        },
        "urls_sample": urls[:10],
        "wrk_output": result.stdout.split("WRK_JSON")[0].rstrip().splitlines(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    r = report["results"]
    print(json.dumps(r, indent=1))
    (args.out / "README.md").write_text(readme(report))
    print(f"[load] wrote {args.out / 'results.json'} and README.md")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if errors == 0 and non_2xx == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
