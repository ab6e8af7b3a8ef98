"""``python -m engine.execution.gpu_step``: one GPU step (verify and time a batch), a child.

The Celery worker never initialises CUDA itself: it runs this module through
engine.isolation.processes.run, pinned with CUDA_VISIBLE_DEVICES and killed with its process group
on timeout. The batch comes in as a JSON file (``[{"name", "family", "knobs"}]``) and the outcomes
go out to another JSON file (never stdout), with where the step's time went (``phases_s``,
engine.timing.phases) and the wall-clock times the child started its work and finished it (the
worker books the rest: the child's start and exit). ``--executor replay:<path>`` answers from
recorded measurements (no GPU); ``--execution-log`` then gets one line per executed candidate, so
tests can count executions. A daemon thread exits the child when its parent dies (kill -9 of the
worker), freeing the GPU.

``--standby``: the worker starts the next step's child while the GPU still runs this one. It
imports what a local step needs (torch, without CUDA) and starts the fork server of its
verification children (engine.isolation.forkserver), then waits for its step: one JSON list of the
arguments above on stdin. It exits at end of input, or after ``--standby-seconds`` without one.
With ENGINE_VERIFY_WARM set (on, kernels) and ``--warm-after PATH``, as soon as PATH exists it
forks ``--warm-verifiers`` warm verifiers (engine.verify.verifier.WarmPool), creates its own CUDA
context and loads the cuBLAS shim its measurement needs: the step before creates PATH (its
``--verified-mark``) once its own verdicts are in, so that these contexts are created while the
GPU times that step's batch, not while its verifiers create theirs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.codegen import get_family
from engine.compilation import compile as compile_module
from engine.config import VerifyWarm
from engine.config import load as load_config
from engine.execution.executor import (
    CompiledCandidate,
    LocalGpuExecutor,
    Outcome,
    ReplayExecutor,
    ReplayTable,
)
from engine.gpu import cuda_driver
from engine.outcomes import CandidateStatus
from engine.problem import Problem
from engine.timing.phases import Phases
from engine.timing.protocol_names import PROTOCOLS
from engine.verify import verifier as verify_module

if TYPE_CHECKING:
    from engine.gpu.runtime import BaselineLibrary
    from engine.isolation.forkserver import ForkServer
    from engine.verify.verifier import WarmPool

PARENT_DIED = 3
WARM_POLL_S = 0.02  # how often a standby child looks for the step before's --verified-mark
# what a local step imports, imported by a standby child before its step (none initialises CUDA)
STANDBY_IMPORTS = ("torch", "engine.execution.executor", "engine.timing.measure")


def exit_if_orphaned(parent: int) -> None:
    """Exits at once when the process that started this one is gone (re-parented)."""
    if os.getppid() != parent:
        os._exit(PARENT_DIED)


def watch_parent(parent: int, interval_s: float = 0.1) -> None:
    """Checks now and then every ``interval_s``. The parent's pid comes from the parent itself:
    read here with getppid(), it would already be init's when the parent died during start-up."""
    exit_if_orphaned(parent)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            exit_if_orphaned(parent)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_batch(
    executor_spec: str,
    problem: Problem,
    batch: Sequence[dict],
    *,
    execution_log: Path | None = None,
    delay_s: float = 0.0,
    parent: int | None = None,
    verify_jobs: int = 1,
    device_seconds: float = 20.0,
    phases: Phases | None = None,
    fork_server: ForkServer | None = None,
    warmed: Warmed | None = None,
    verified_mark: Path | None = None,
    protocol: str = "device",
) -> list[dict]:
    """The batch's outcomes (dicts of engine.execution.executor.Outcome), timed in ``protocol``
    (the campaign's reward protocol); ``phases`` gets where
    the time went (engine.timing.phases); ``fork_server``: one started for the verifications (else
    engine.verify.verifier's choice); ``warmed``: what a standby child prepared for them;
    ``verified_mark``: a file created once the verdicts are in (local only)."""
    phases = phases if phases is not None else Phases()
    configs = [get_family(c["family"]).from_knobs(c["knobs"]) for c in batch]
    if executor_spec.startswith("replay:"):
        with phases("imports"):
            table = ReplayTable.load([executor_spec[len("replay:") :]])
            executor = ReplayExecutor(table, protocol=protocol)
        if delay_s:
            with phases("timing"):
                time.sleep(delay_s)  # stands in for the GPU's time
        if parent is not None:
            exit_if_orphaned(parent)  # a worker killed during the GPU's time measures nothing
        outcomes = executor.execute(problem, [CompiledCandidate(c.name, c) for c in configs])
        if execution_log is not None:
            with execution_log.open("a") as log:
                log.writelines(f"{problem.key} {o.name}\n" for o in outcomes)
                log.write(f"# pid {os.getpid()} ppid {os.getppid()} at {time.time():.2f}\n")
        return [asdict(o) for o in outcomes]
    if executor_spec != "local":
        raise ValueError(f"unknown executor {executor_spec!r}: 'local' or 'replay:<path>'")
    return run_local(
        problem,
        configs,
        verify_jobs=verify_jobs,
        device_seconds=device_seconds,
        phases=phases,
        fork_server=fork_server,
        warmed=warmed,
        verified_mark=verified_mark,
        protocol=protocol,
    )


def run_local(
    problem: Problem,
    configs: Sequence[Any],
    *,
    verify_jobs: int,
    device_seconds: float,
    phases: Phases,
    fork_server: ForkServer | None = None,
    warmed: Warmed | None = None,
    verified_mark: Path | None = None,
    protocol: str = "device",
) -> list[dict]:
    """Verification children first, torch after: the children (one per candidate) start before
    this process imports torch, and run while it imports torch and sets up the measurement
    (with ``warmed``, they and this process's context were made before the step came)."""
    warmed = warmed or Warmed()

    with phases("compile_lookup"):
        arch = cuda_driver.local_arch()
        # the compile cache: built by the compile step already, for this arch
        built = compile_module.compile_configs(configs, target_arch=arch)
    ready = [(c, r.library) for c, r in zip(configs, built, strict=True) if r.ok and r.library]
    verifications = verify_module.Verifications(
        [library for _, library in ready],
        problem,
        jobs=verify_jobs,
        fork_server=fork_server,
        warm=warmed.verifiers,
    )
    with phases("imports"):
        executor = LocalGpuExecutor(
            protocols=(protocol,),
            arch=arch,
            verify_jobs=verify_jobs,
            device_seconds=device_seconds,
            after_verification=verified_mark.touch if verified_mark else lambda: None,
            shim=warmed.shim,
        )
    candidates = [CompiledCandidate(c.name, c, library) for c, library in ready]
    if not candidates and verified_mark is not None:
        verified_mark.touch()  # nothing to verify: the next step's verifiers may warm up now
    by_name = {}
    if candidates:
        executed = executor.execute(problem, candidates, verifications=verifications, phases=phases)
        by_name = {o.name: o for o in executed}
    outcomes = [
        by_name.get(c.name) or Outcome(c.name, CandidateStatus.COMPILE_ERROR, "nvcc", r.error or "")
        for c, r in zip(configs, built, strict=True)
    ]
    return [asdict(o) for o in outcomes]


def standby(args: argparse.Namespace) -> int:
    """Prepares a step, then waits for it (``--standby``; the module's docstring)."""
    watch_parent(args.parent_pid if args.parent_pid is not None else os.getppid())
    server = None
    warm_after = None
    if args.executor == "local":
        if verify_module.fork_server_on():
            server, _folder = verify_module.new_fork_server(start=True)
            if load_config().verify_warm != VerifyWarm.OFF:
                warm_after = args.warm_after
        for module in STANDBY_IMPORTS:
            importlib.import_module(module)
    line, warmed = wait_for_step(args, server, warm_after)
    if not line.strip():
        return 0
    step_argv = json.loads(line)
    if "--standby" in step_argv:
        raise SystemExit("a standby step child's step cannot be another standby")
    return main(step_argv, fork_server=server, warmed=warmed)


@dataclass(frozen=True)
class Warmed:
    """What a standby child prepared once the step before was verified (ENGINE_VERIFY_WARM):
    warm verifiers, and the cuBLAS shim of its measurement in a process whose CUDA context
    exists already."""

    verifiers: WarmPool | None = None
    shim: BaselineLibrary | None = None


def wait_for_step(
    args: argparse.Namespace, server: ForkServer | None, warm_after: Path | None
) -> tuple[str, Warmed | None]:
    """The step's line from stdin ("" at its end, or after ``--standby-seconds``), and what was
    warmed meanwhile once ``warm_after`` appeared (None if it did not)."""
    deadline = time.monotonic() + args.standby_seconds
    warmed = None
    while (remaining := deadline - time.monotonic()) > 0:
        watching = server is not None and warm_after is not None and warmed is None
        poll = min(remaining, WARM_POLL_S) if watching else remaining
        if select.select([sys.stdin], [], [], poll)[0]:
            return sys.stdin.readline(), warmed
        if watching and warm_after.exists():  # type: ignore[union-attr]
            warmed = warm_up(server, args.warm_verifiers)  # type: ignore[arg-type]
    return "", warmed


def warm_up(server: ForkServer, verifiers: int) -> Warmed:
    """The warm verifiers first (their contexts take turns with ours), then this process's
    context and shim."""

    pool = verify_module.WarmPool.for_this_process(server, verifiers)
    return Warmed(pool, prepare_measurement())


def prepare_measurement() -> BaselineLibrary | None:
    """This process's CUDA context (no kernel runs) and the cuBLAS shim, before the step's
    problem is known; None where either fails (the step meets the failure again, and reports
    it)."""
    import torch

    from engine.timing import measure

    try:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the runtime creates the context at the first allocation
        return measure.load_shim(load_config())
    except Exception:
        return None


def main(
    argv: Sequence[str] | None = None,
    *,
    fork_server: ForkServer | None = None,
    warmed: Warmed | None = None,
) -> int:
    started_at = time.time()  # after this module's imports: the worker books what came before
    clock = time.perf_counter()
    parser = argparse.ArgumentParser(
        prog="python -m engine.execution.gpu_step", description=__doc__
    )
    parser.add_argument("--executor", required=True, help="local, or replay:<recorded json>")
    parser.add_argument("--problem", help="problem key, e.g. 4096x4096x4096_tn")
    parser.add_argument("--batch", type=Path, help="JSON list of candidates")
    parser.add_argument("--out", type=Path, help="where the outcomes go")
    parser.add_argument("--execution-log", type=Path)
    parser.add_argument("--delay-ms", type=int, default=0, help="replay: simulated GPU time")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--verify-jobs", type=int, default=1, help="local: verifications at once")
    parser.add_argument("--device-seconds", type=float, default=20.0, help="local: timing cap")
    parser.add_argument("--standby", action="store_true", help="prepare, then read the step")
    parser.add_argument("--standby-seconds", type=float, default=900.0, help="wait at most")
    parser.add_argument("--warm-after", type=Path, help="standby: warm verifiers once it exists")
    parser.add_argument("--warm-verifiers", type=int, default=1, help="standby: how many")
    parser.add_argument("--verified-mark", type=Path, help="local: created once verified")
    parser.add_argument(
        "--protocol",
        default="device",
        choices=PROTOCOLS,
        help="the timing protocol of the outcomes (the campaign's reward protocol)",
    )
    args = parser.parse_args(argv)
    if args.standby:
        return standby(args)
    for required in ("problem", "batch", "out"):
        if getattr(args, required) is None:
            parser.error(f"--{required} is required (except with --standby)")
    parent = args.parent_pid if args.parent_pid is not None else os.getppid()
    watch_parent(parent)
    shape, _, layout = args.problem.rpartition("_")
    phases = Phases()
    outcomes = run_batch(
        args.executor,
        Problem.parse(shape, layout),
        json.loads(args.batch.read_text()),
        execution_log=args.execution_log,
        delay_s=args.delay_ms / 1000,
        parent=parent,
        verify_jobs=args.verify_jobs,
        device_seconds=args.device_seconds,
        phases=phases,
        fork_server=fork_server,
        warmed=warmed,
        verified_mark=args.verified_mark,
        protocol=args.protocol,
    )
    phases.close(time.perf_counter() - clock)
    result = {
        "outcomes": outcomes,
        "phases_s": phases.to_dict(),
        "info": phases.info,
        "started_at": started_at,
        "finished_at": time.time(),
    }
    # renamed into place whole: the worker goes on as soon as the file exists (toolchain's done)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(result))
    os.replace(partial, args.out)
    return 0


if __name__ == "__main__":
    code = main()
    # The outcomes are written: skip the interpreter's teardown (torch's modules, the CUDA
    # context, the loaded libraries), which the worker would wait for. Measured in a replayed
    # stack run without a GPU: 0.27 s of each step went there.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
