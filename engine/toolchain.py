"""One wrapper for every subprocess the engine starts (nvcc, the verifier, benchmark children).

Each child runs in its own process group so that a timeout kills it and everything it started;
output is captured and truncated, and the command is kept (shell-quoted) for the UI.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

OUTPUT_LIMIT = 64 * 1024


class Timeout(IntEnum):
    """Seconds allowed per kind of child process."""

    NVCC = 300
    VERIFY = 180
    BENCH = 600
    PROBE = 60


@dataclass(frozen=True, slots=True)
class ProcessResult:
    command: str
    returncode: int | None  # None when killed on timeout
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> ProcessResult:
    """Run ``argv``; never raises for the child's failure or timeout (that is in the result)."""
    args = [os.fspath(a) for a in argv]
    started = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        out, err = proc.communicate()
    return ProcessResult(
        command=shlex.join(args),
        returncode=None if timed_out else proc.returncode,
        stdout=truncate(out),
        stderr=truncate(err),
        seconds=time.monotonic() - started,
        timed_out=timed_out,
    )


def kill_group(proc: subprocess.Popen[str], grace: float = 2.0) -> None:
    """SIGTERM the child's process group, give it ``grace`` seconds, then SIGKILL the whole
    group, so that no grandchild (one that ignores SIGTERM, say) survives holding the pipes."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def truncate(text: str | None, limit: int = OUTPUT_LIMIT) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"
