"""``python -m engine.gpu_step``: one GPU step (verify and time a batch) in a child process.

The Celery worker never initialises CUDA itself: it runs this module through engine.toolchain.run,
pinned with CUDA_VISIBLE_DEVICES and killed with its process group on timeout. The batch comes in
as a JSON file (``[{"name", "family", "knobs"}]``) and the outcomes go out to another JSON file
(never stdout). ``--executor replay:<path>`` answers from recorded measurements (no GPU);
``--execution-log`` then gets one line per executed candidate, so tests can count executions.
A daemon thread exits the child when its parent dies (kill -9 of the worker), freeing the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from engine.families import get_family
from engine.problem import Problem

PARENT_DIED = 3


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
) -> list[dict]:
    from engine.campaign.executor import (
        CompiledCandidate,
        LocalGpuExecutor,
        ReplayExecutor,
        ReplayTable,
    )

    configs = [get_family(c["family"]).from_knobs(c["knobs"]) for c in batch]
    if executor_spec.startswith("replay:"):
        executor = ReplayExecutor(ReplayTable.load([executor_spec[len("replay:") :]]))
        if delay_s:
            time.sleep(delay_s)  # stands in for the GPU's time
        if parent is not None:
            exit_if_orphaned(parent)  # a worker killed during the GPU's time measures nothing
        outcomes = executor.execute(problem, [CompiledCandidate(c.name, c) for c in configs])
        if execution_log is not None:
            with execution_log.open("a") as log:
                log.writelines(f"{problem.key} {o.name}\n" for o in outcomes)
                log.write(f"# pid {os.getpid()} ppid {os.getppid()} at {time.time():.2f}\n")
    elif executor_spec == "local":
        from engine.campaign.executor import STATUS_COMPILE_ERROR, Outcome
        from engine.campaign.loop import compile_configs

        executor = LocalGpuExecutor(verify_jobs=verify_jobs, device_seconds=device_seconds)
        # the compile cache: built by the compile step already, for this arch
        built = compile_configs(configs, target_arch=executor.arch)
        ready = [
            CompiledCandidate(c.name, c, r.library)
            for c, r in zip(configs, built, strict=True)
            if r.ok and r.library is not None
        ]
        by_name = {o.name: o for o in executor.execute(problem, ready)} if ready else {}
        outcomes = [
            by_name.get(c.name) or Outcome(c.name, STATUS_COMPILE_ERROR, "nvcc", r.error or "")
            for c, r in zip(configs, built, strict=True)
        ]
    else:
        raise ValueError(f"unknown executor {executor_spec!r}: 'local' or 'replay:<path>'")
    return [asdict(o) for o in outcomes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.gpu_step", description=__doc__)
    parser.add_argument("--executor", required=True, help="local, or replay:<recorded json>")
    parser.add_argument("--problem", required=True, help="problem key, e.g. 4096x4096x4096_tn")
    parser.add_argument("--batch", type=Path, required=True, help="JSON list of candidates")
    parser.add_argument("--out", type=Path, required=True, help="where the outcomes go")
    parser.add_argument("--execution-log", type=Path)
    parser.add_argument("--delay-ms", type=int, default=0, help="replay: simulated GPU time")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--verify-jobs", type=int, default=1, help="local: verifications at once")
    parser.add_argument("--device-seconds", type=float, default=20.0, help="local: timing cap")
    args = parser.parse_args(argv)
    parent = args.parent_pid if args.parent_pid is not None else os.getppid()
    watch_parent(parent)
    shape, _, layout = args.problem.rpartition("_")
    outcomes = run_batch(
        args.executor,
        Problem.parse(shape, layout),
        json.loads(args.batch.read_text()),
        execution_log=args.execution_log,
        delay_s=args.delay_ms / 1000,
        parent=parent,
        verify_jobs=args.verify_jobs,
        device_seconds=args.device_seconds,
    )
    args.out.write_text(json.dumps(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
