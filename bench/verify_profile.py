"""Where a verifier's wall time goes when many run at once (bench/NOTES.md §15).

In a whole-stack run each verifier took about 5 s while 16 ran together and the GPU was far from
busy. This runs the GPU step's own verification path (engine.verify.verifier.Verifications, children
forked from one fork server) on a batch of compiled library kernels at one shape, with 1, 4, 8
and 16 verifiers at once, and reports per setting: the batch's wall time, verdicts per second,
the GPU's busy fraction (NVML) and each verifier's phases (start, CUDA init, session, checks)
and each check's seconds, as the median over the batch.

    python3 bench/verify_profile.py --db CAMPAIGN.sqlite [--shapes 4096x4096x4096] [--kernels 16]
        [--jobs 1,4,8,16] [--variant NAME:VAR=VALUE ...] [--fault] [--out FILE]

``--variant`` runs every batch again with other settings in the verifiers' environment, for an
A/B within one call (e.g. ``sleep:ENGINE_VERIFY_BUSY_STREAM=sleep``). With
``ENGINE_VERIFY_WARM=on`` (or ``kernels``) in a variant, the batch's verifiers are warm
(engine.verify.verifier.WarmPool): forked ``WARM_LEAD_S`` before the batch, as while the batch
before is timed; the batch's wall time counts from when its libraries are handed over. ``--fault``
adds one kernel that traps on the device (tests/fixtures/cheats/trap.cu) to every batch: its
own verdict must be ``runtime_error``, and any other failure is a fault spilling over onto
honest verifiers (which MPS clients sharing one server may suffer). With
``ENGINE_HEAT_WHILE_VERIFYING=on`` in a variant, this process runs the shape's baselines back
to back while the batch verifies, as a GPU step's heat-up then does
(engine.timing.measure.Session.heat_while): how much that load slows the verifiers.

The kernels are the campaign's best verified ones (compiled from the cache, built elsewhere and
carried); they must be honest, so every verdict is expected to be ok.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.stack.stack_run import GpuSampler, busy_fraction  # noqa: E402
from engine.campaign.storage import SqliteStorage  # noqa: E402
from engine.compilation.compile import compile_configs  # noqa: E402
from engine.config import VerifyWarm  # noqa: E402
from engine.config import load as load_config  # noqa: E402
from engine.execution.final import config_of, top_records  # noqa: E402
from engine.gpu import cuda_driver  # noqa: E402
from engine.gpu.environment import collect  # noqa: E402
from engine.isolation import sandbox  # noqa: E402
from engine.isolation.forkserver import ForkServer  # noqa: E402
from engine.problem import Layout, Problem  # noqa: E402
from engine.verify import harness_kernels  # noqa: E402
from engine.verify.verifier import (  # noqa: E402
    Verifications,
    VerifyResult,
    WarmPool,
    new_fork_server,
)

BASELINE = "cublaslt_autotune"
WARM_LEAD_S = 3.0  # a warm batch's verifiers are forked this long before it (a step's timing)


def heat_session(problem: Problem, sessions: dict[str, Any]) -> Any:
    """With ENGINE_HEAT_WHILE_VERIFYING on: a measurement session for ``problem`` with its
    baselines ready (one per shape, kept in ``sessions``); else None."""
    if not load_config().heat_while_verifying:
        return None
    if problem.key not in sessions:
        from engine.timing.measure import Session

        session = Session(problem)
        session.prepare_baselines()
        sessions[problem.key] = session
    return sessions[problem.key]


def campaign_kernels(db: Path, count: int) -> list[Any]:
    """``count`` distinct configs among the campaign's per-shape best (two per shape)."""
    storage = SqliteStorage(db)
    try:
        configs: dict[str, Any] = {}
        for campaign in storage.campaign_names():
            for problem in storage.problems(campaign):
                for record in top_records(storage.candidates(campaign, problem.key), BASELINE, 2):
                    configs.setdefault(record.name, config_of(record))
    finally:
        storage.close()
    return list(configs.values())[:count]


FAULT = "fault:trap"


def fault_kernel() -> dict[str, Path]:
    """The trapping fixture, built for NN (the profile's layout), under the name FAULT."""
    built = harness_kernels.build_one(harness_kernels.CHEATS / "trap.cu", Layout.NN)
    if not built.ok or built.library is None:
        raise SystemExit(f"the trapping fixture did not build: {built.error}")
    return {FAULT: built.library}


def as_expected(name: str, verdict: VerifyResult) -> bool:
    return verdict.reason == "runtime_error" if name == FAULT else verdict.ok


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def verdict_profile(names: list[str], verdicts: list[VerifyResult]) -> dict[str, Any]:
    """Medians over the batch: the child's start-up and phases, and each check's seconds."""
    checks: dict[str, list[float]] = {}
    for verdict in verdicts:
        for check in verdict.checks:
            seconds = check.get("detail", {}).get("seconds")
            if seconds is not None:
                checks.setdefault(check["name"], []).append(seconds)
    return {
        "ok": sum(v.ok for v in verdicts),
        "as_expected": sum(as_expected(n, v) for n, v in zip(names, verdicts, strict=True)),
        "busy_stream": sorted({v.busy_stream for v in verdicts}),
        "reasons": sorted({v.reason for v in verdicts if not v.ok}),
        "failures": [
            {"kernel": name, "reason": v.reason, "message": v.message}
            for name, v in zip(names, verdicts, strict=True)
            if not v.ok
        ],
        "verifier_s": median([v.seconds for v in verdicts]),
        "start_s": median([v.startup_s["start"] for v in verdicts if "start" in v.startup_s]),
        "cuda_init_s": median([v.startup_s.get("cuda_init", 0.0) for v in verdicts]),
        "warm_up_s": median([v.startup_s["warm"] for v in verdicts if "warm" in v.startup_s]),
        "session_s": median([v.phases_s["session"] for v in verdicts if "session" in v.phases_s]),
        "checks_s": median([v.phases_s["checks"] for v in verdicts if "checks" in v.phases_s]),
        **{
            f"{part}_s": median([v.phases_s[part] for v in verdicts if part in v.phases_s])
            for part in (
                "session_library",
                "session_context",
                "session_allocate",
                "session_fill",
                "session_buffers",
                "session_warm_up",
            )
        },
        "check_s": {name: median(values) for name, values in checks.items()},
    }


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE[,VAR=VALUE]`` → (name, variables); ValueError when malformed."""
    name, _, assignments = text.partition(":")
    pairs = [a.partition("=") for a in assignments.split(",") if a]
    if not name or not pairs or any(not var or not eq for var, eq, _ in pairs):
        raise ValueError(f"--variant {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
    unpassed = [var for var, _, _ in pairs if not sandbox.is_passed(var)]
    if unpassed:
        raise ValueError(f"--variant {text!r}: {', '.join(unpassed)} would not reach a verifier")
    return name, {var: value for var, _, value in pairs}


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``variables`` set (verifiers' environments are built
    from it), restored after."""
    saved = {var: os.environ.get(var) for var in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def profile(
    problem: Problem,
    kernels: dict[str, Path],
    jobs: int,
    server: ForkServer,
    sampler: GpuSampler,
    heat: Any = None,
) -> dict:
    """One batch of ``kernels`` (name → library) verified ``jobs`` at once; ``heat``: a
    measurement session that runs its baselines meanwhile."""
    warm = None
    if load_config().verify_warm != VerifyWarm.OFF:
        warm = WarmPool.for_this_process(server, jobs)
        time.sleep(WARM_LEAD_S)
    started = time.time()
    batch = Verifications(list(kernels.values()), problem, jobs=jobs, fork_server=server, warm=warm)
    heated = heat.heat_while(batch.running) if heat is not None else 0.0
    verdicts = batch.results()
    ended = time.time()
    wall = ended - started
    return {
        "problem": problem.key,
        "jobs": jobs,
        "jobs_used": batch.jobs,
        "mps": batch.mps_pipe is not None,
        "retried_alone": batch.retried_alone,
        "retried_outside_mps": batch.retried_outside_mps,
        "warm": batch.warm_used,
        "heat_while_verifying_s": round(heated, 3),
        "kernels": len(kernels),
        "wall_s": round(wall, 3),
        "verdicts_per_s": round(len(kernels) / wall, 3),
        "gpu": busy_fraction(sampler.samples, started, ended),
        **verdict_profile(list(kernels), verdicts),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a campaign database")
    parser.add_argument("--shapes", default="4096x4096x4096,8192x1024x4096")
    parser.add_argument("--kernels", type=int, default=16)
    parser.add_argument("--jobs", default="1,4,8,16")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE[,VAR=VALUE]",
        help="also run every batch with these variables in the verifiers' environment (ENGINE_*"
        " and CUDA_* reach them), e.g. sleep:ENGINE_VERIFY_BUSY_STREAM=sleep (repeatable)",
    )
    parser.add_argument("--fault", action="store_true", help="one trapping kernel in each batch")
    parser.add_argument("--out", type=Path, default=Path("verify-profile.json"))
    args = parser.parse_args(argv)
    try:
        variants = {"default": {}, **dict(parse_variant(v) for v in args.variant)}
    except ValueError as exc:
        parser.error(str(exc))

    configs = campaign_kernels(args.db, args.kernels)
    built = compile_configs(configs, target_arch=cuda_driver.local_arch())
    kernels = {c.name: b.library for c, b in zip(configs, built, strict=True) if b.ok and b.library}
    print(f"{len(kernels)} kernels ({sum(b.cached for b in built)} from the cache)", flush=True)
    if args.fault:
        kernels = {**fault_kernel(), **kernels}
    sampler = GpuSampler(0)
    sampler.start()
    server, folder = new_fork_server(start=True)  # one, as a GPU worker keeps one
    runs = []
    sessions: dict[str, Any] = {}
    try:
        time.sleep(8)  # its imports (torch) are done before the first batch, as when warm
        for shape in args.shapes.split(","):
            problem = Problem.parse(shape)
            for (variant, env), jobs in itertools.product(
                variants.items(), (int(j) for j in args.jobs.split(","))
            ):
                with environment(env):
                    heat = heat_session(problem, sessions)
                    run = profile(problem, kernels, jobs, server, sampler, heat)
                    run = {"variant": variant, **run}
                runs.append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "check_s"}), flush=True)
    finally:
        server.close()
        folder.cleanup()
        sampler.stop()
    report = {
        "what": "verification of a batch of honest kernels, by verifiers at once (issue 7)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": collect().to_dict(),
        "gpu_samples": sampler.source or sampler.reason,
        "runs": runs,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0 if all(r["as_expected"] == r["kernels"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
