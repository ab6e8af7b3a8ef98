"""Starting the GPU step child (``python -m engine.execution.gpu_step``) for a caller that runs
batches from outside this package (the web app's Celery GPU worker): its arguments, its
environment, and a standby child that imports torch and starts its fork server while the GPU still
runs the step before. The caller passes its settings; nothing here reads Django's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.isolation import processes, sandbox

VERIFIED_MARK = "verified"  # a local step creates it in its folder once its verdicts are in
GPU_STEP_MODULE = "engine.execution.gpu_step"


def child_env(workdir: Path, device: str) -> dict[str, str]:
    """The GPU step child's environment: engine.isolation.sandbox's for an engine child
    (allow-listed: no Django secret key, database or broker URL, API key; a private HOME and TMPDIR
    in ``workdir``; the repository on PYTHONPATH) with the GPU ``device`` pinned."""
    return {**sandbox.engine_child_env(workdir), "CUDA_VISIBLE_DEVICES": device}


def step_args(
    spec: str,
    problem_key: str,
    workdir: Path,
    *,
    protocol: str = "device",
    verify_jobs: int,
    device_seconds: float,
    execution_log: Path | None = None,
    replay_delay_ms: float = 0,
) -> list[str]:
    """engine.execution.gpu_step's arguments for a batch in ``workdir`` (batch.json,
    outcomes.json), timed in the campaign's reward ``protocol``; ``execution_log`` and
    ``replay_delay_ms`` apply to a replay executor alone."""
    args = ["--executor", spec, "--problem", problem_key,
            "--batch", str(workdir / "batch.json"), "--out", str(workdir / "outcomes.json"),
            "--parent-pid", str(os.getpid()), "--protocol", protocol]  # fmt: skip
    if spec == "local":
        args += ["--verify-jobs", str(verify_jobs), "--device-seconds", str(device_seconds),
                 "--verified-mark", str(workdir / VERIFIED_MARK)]  # fmt: skip
    if spec.startswith("replay:"):
        if execution_log is not None:
            args += ["--execution-log", str(execution_log)]
        args += ["--delay-ms", str(replay_delay_ms)]
    return args


def run_fresh(
    args: list[str], workdir: Path, *, device: str, timeout: float, done: Callable[[], bool]
) -> processes.ProcessResult:
    """One GPU step in a child started now, in ``workdir`` and the candidate sandbox."""
    return processes.run(
        [sys.executable, "-m", GPU_STEP_MODULE, *args],
        timeout=timeout,
        cwd=workdir,
        env=child_env(workdir, device),
        policy=sandbox.gpu_policy(),
        done=done,
    )


class StandbyStep:
    """A GPU step child started before its step (``--standby``): it imports torch and starts its
    verifications' fork server in its own empty working directory and the same sandbox as any
    step child. With ``warm_after`` (the step before's VERIFIED_MARK) and ENGINE_VERIFY_WARM set,
    it forks ``verify_jobs`` warm verifiers once that mark exists."""

    def __init__(
        self,
        spec: str,
        *,
        device: str,
        verify_jobs: int,
        timeout: float,
        warm_after: Path | None = None,
    ) -> None:
        self.spec = spec
        self.device = device
        self.timeout = timeout
        self._folder = tempfile.TemporaryDirectory(prefix="gemmforge-gpu-")
        self.workdir = Path(self._folder.name)
        argv = [sys.executable, "-m", GPU_STEP_MODULE, "--standby", "--executor", spec,
                "--parent-pid", str(os.getpid())]  # fmt: skip
        if warm_after is not None:
            argv += ["--warm-after", str(warm_after), "--warm-verifiers", str(verify_jobs)]
        self.running = processes.start(
            argv, cwd=self.workdir, env=child_env(self.workdir, device), policy=sandbox.gpu_policy()
        )

    def fits(self, spec: str, device: str) -> bool:
        """Still waiting, for this executor and GPU (the settings may change in between)."""
        return self.spec == spec and self.device == device and self.running.alive()

    def run(self, args: list[str], done: Callable[[], bool]) -> processes.ProcessResult:
        return self.running.finish(stdin=json.dumps(args) + "\n", timeout=self.timeout, done=done)

    def discard(self) -> None:
        self.running.discard()
        self.cleanup()

    def cleanup(self) -> None:
        self._folder.cleanup()
