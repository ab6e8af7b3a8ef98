"""An MPS control daemon of our own for a GPU's verification children.

Without MPS the GPU runs one process's context at a time, so sixteen verifiers that each launch
short kernels take turns on it. Clients of one MPS server run concurrently and their contexts
are lighter to create: on the H200, 16 verifiers at once give 4.6–4.8 verdicts per second instead
of 3.6 (bench/NOTES.md §16). A fatal fault of one client reaches all of them, which
engine.verify.verifier.Verifications answers by verifying those again outside MPS.

The daemon gets a pipe folder of its own, so only processes given ``CUDA_MPS_PIPE_DIRECTORY``
become its clients: engine.verify.verifier gives it to verification children alone (read with
engine.config.verify_mps_pipe), and the process that times kernels keeps a context of its own, as
a user's process would.

Starting it changes no setting of the GPU (compute mode, clocks, MIG); stopping it ends its
server. Expected failures (no binary, a daemon that does not answer) are returned as text.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine import config

CONTROL = "nvidia-cuda-mps-control"
ANSWER_SECONDS = 10.0


@dataclass
class MpsDaemon:
    """A running control daemon; its server starts with its first client."""

    folder: Path
    control: str
    gpu: str = "0"  # the one GPU its server uses (CUDA_VISIBLE_DEVICES); clients see it as 0

    @property
    def pipe_dir(self) -> Path:
        return self.folder / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.folder / "log"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
            "CUDA_VISIBLE_DEVICES": self.gpu,
        }

    def ask(self, command: str, timeout: float = 5.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.control],
            input=command + "\n",
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def answers(self) -> bool:
        try:
            return self.ask("get_server_list").returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def log_tail(self, lines: int = 20) -> str:
        path = self.log_dir / "control.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Ends the daemon and its server (a client still running loses its GPU work)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.ask("quit")


def start(
    folder: Path | None = None, *, gpu: str | None = None, control: str | None = None
) -> MpsDaemon | str:
    """Starts a daemon for one GPU (``gpu``: an index or UUID as CUDA_VISIBLE_DEVICES takes
    it; by default this process's first visible GPU) with its pipe and log under ``folder`` (a
    new temporary folder when None); the daemon, or why not."""
    control = control or CONTROL
    binary = shutil.which(control)
    if binary is None:
        return f"{control} is not on PATH"
    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="gemmforge-mps-"))
    daemon = MpsDaemon(folder, binary, gpu or first_visible_gpu())
    daemon.pipe_dir.mkdir(parents=True, exist_ok=True)
    daemon.log_dir.mkdir(parents=True, exist_ok=True)
    started = subprocess.run(
        [binary, "-d"], env=daemon.env(), capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        return f"{control} -d exited with {started.returncode}: {started.stderr.strip()[:300]}"
    deadline = time.monotonic() + ANSWER_SECONDS
    while time.monotonic() < deadline:
        if daemon.answers():
            return daemon
        time.sleep(0.1)
    daemon.stop()
    return f"{control} did not answer within {ANSWER_SECONDS:.0f} s: {daemon.log_tail(3)}"


def first_visible_gpu() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


_ours: MpsDaemon | None = None  # the daemon this process started for verification


def ensure_for_verification(enabled: bool, *, gpu: str | None = None) -> str:
    """When ``enabled`` (ENGINE_VERIFY_MPS), a daemon for ``gpu`` (start's default) that serves
    this process's verification children and its children's (its pipe folder is set here in
    VERIFY_MPS_PIPE_VARIABLE and inherited), stopped when this process exits; nothing when one is
    already named in the environment, or when this process or its parent could not start one
    (why is set in VERIFY_MPS_UNAVAILABLE_VARIABLE, so that neither it nor its children, a GPU
    worker's step children, try again at every step, which could cost ANSWER_SECONDS each time).
    Says what it did."""
    global _ours
    if not enabled:
        return "off"
    if pipe := config.verify_mps_pipe():
        return f"on ({pipe})"
    if unavailable := config.verify_mps_unavailable():
        return f"unavailable: {unavailable}"
    daemon = start(gpu=gpu)
    if isinstance(daemon, str):
        os.environ[config.VERIFY_MPS_UNAVAILABLE_VARIABLE] = daemon
        return f"unavailable: {daemon}"
    _ours = daemon
    os.environ[config.VERIFY_MPS_PIPE_VARIABLE] = str(daemon.pipe_dir)
    atexit.register(stop_started)
    return f"on ({daemon.pipe_dir}, started)"


def stop_started() -> None:
    """Stops the daemon :func:`ensure_for_verification` started here, if any (at exit; a Celery
    pool process, which ends without running atexit, calls it from worker_process_shutdown)."""
    global _ours
    if _ours is not None and config.verify_mps_pipe() == str(_ours.pipe_dir):
        os.environ.pop(config.VERIFY_MPS_PIPE_VARIABLE, None)
    if _ours is not None:
        _ours.stop()
        _ours = None


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.gpu.mps start|stop FOLDER``: start prints the pipe folder (its last line)
    for ENGINE_VERIFY_MPS_PIPE; stop ends the daemon and prints its log's tail."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m engine.gpu.mps", description=main.__doc__)
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.action == "start":
        daemon = start(args.folder)
        if isinstance(daemon, str):
            print(f"no MPS: {daemon}")
            return 1
        print(daemon.pipe_dir)
        return 0
    daemon = MpsDaemon(args.folder, shutil.which(CONTROL) or CONTROL)
    daemon.stop()
    print(daemon.log_tail())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
