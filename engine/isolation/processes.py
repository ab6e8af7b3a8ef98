"""One wrapper for every subprocess the engine starts (nvcc, the verifier, benchmark children).

Each child runs in its own process group so that a timeout kills it and everything it started;
output is captured and truncated, and the command is kept (shell-quoted) for the UI. Children
that build or load candidate code also get a sandbox policy (engine.isolation.sandbox): limits and a
network namespace set up before exec, and a watchdog here on the group's resident memory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path

from engine.config import SandboxNetwork
from engine.isolation import sandbox
from engine.isolation.sandbox import Applied, Policy

OUTPUT_LIMIT = 64 * 1024
MEMORY_POLL_SECONDS = 0.5
DONE_POLL_SECONDS = 0.02  # how often a wait with ``done`` asks it
# a child done early may take this long to exit before its group is killed
EXIT_GRACE_SECONDS = 30.0
# a child that dies of these signals was stopped by one of its sandbox limits
LIMIT_SIGNALS = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}


class Timeout(IntEnum):
    """Seconds allowed per kind of child process."""

    NVCC = 300
    VERIFY = 180
    BENCH = 600
    PROBE = 60


@dataclass(frozen=True, slots=True)
class ProcessResult:
    command: str
    returncode: int | None  # None when killed here (on timeout or over its memory)
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    # why the child was stopped: "timeout" or "memory" (killed here, returncode None),
    # "stopped" (stop_children: killed here or never started, returncode None), or
    # "cpu_time" / "file_size" (its own rlimit's signal); None when it ended by itself
    killed_for: str | None = None
    sandbox: Applied | None = None  # None: run without a sandbox policy
    # returned once the caller's ``done`` said the child's work was complete, before it exited
    # (returncode None, its output unread); it is reaped in the background
    early: bool = False

    @property
    def ok(self) -> bool:
        ended_well = self.returncode == 0 or self.early
        return ended_well and not self.timed_out and self.killed_for is None


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    policy: Policy | None = None,
    done: Callable[[], bool] | None = None,
) -> ProcessResult:
    """Run ``argv``; never raises for the child's failure or timeout (that is in the result).

    With ``policy``, the child runs under it (engine.isolation.sandbox) and the result says what was
    applied; a child over its resident-memory limit is killed like one over its time. With
    ``done``, asked every DONE_POLL_SECONDS: the result comes as soon as it says the child's
    work is complete (``early``), while the child still exits."""
    args = [os.fspath(a) for a in argv]
    if (reason := stopping()) is not None:
        return _not_started(args, reason)
    proc, applied = _start(args, cwd=cwd, env=env, stdin=stdin, policy=policy)
    return Running(args, proc, applied, policy).finish(stdin=stdin, timeout=timeout, done=done)


@dataclass(frozen=True, slots=True)
class Running:
    """A child started by :func:`start` that waits for its input: :meth:`finish` gives it its
    input and waits for it as :func:`run` does, the timeout counting from then."""

    args: list[str]
    proc: subprocess.Popen[str]
    sandbox: Applied | None
    policy: Policy | None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(
        self, *, stdin: str | None, timeout: float, done: Callable[[], bool] | None = None
    ) -> ProcessResult:
        started = time.monotonic()
        proc = self.proc
        if (reason := stopping()) is not None:
            self.discard(grace=0.0)
            return _not_started(self.args, reason, applied=self.sandbox)
        resident_limit = self.policy.limits.resident_bytes if self.policy is not None else None
        with _waiting_on(proc) as stopped:
            out, err, killed_for = _wait(proc, stdin, started + timeout, resident_limit, done)
        if stopped.is_set() and killed_for != "done":
            killed_for = STOPPED
        early = killed_for == "done"
        if early:
            killed_for = None
            _reap_later(proc, EXIT_GRACE_SECONDS)
        elif killed_for is None and proc.returncode is not None and proc.returncode < 0:
            killed_for = LIMIT_SIGNALS.get(-proc.returncode)
        killed_here = killed_for in ("timeout", "memory", STOPPED)
        return ProcessResult(
            command=shlex.join(self.args),
            returncode=None if killed_here or early else proc.returncode,
            stdout=truncate(out),
            stderr=truncate(err),
            seconds=time.monotonic() - started,
            timed_out=killed_for == "timeout",
            killed_for=killed_for,
            sandbox=self.sandbox,
            early=early,
        )

    def discard(self, grace: float = 5.0) -> None:
        """Ends a child that will get no input: its stdin closes (end of input), and its group
        is killed if it has not exited ``grace`` seconds later."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_group(self.proc, grace=0.0)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        self.proc.wait()


def start(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    policy: Policy | None = None,
) -> Running:
    """Starts ``argv`` now, as :func:`run` would, with its stdin a pipe for :meth:`Running.finish`
    to write to later (a child that prepares itself before its input arrives)."""
    args = [os.fspath(a) for a in argv]
    proc, applied = _start(args, cwd=cwd, env=env, stdin="", policy=policy)
    return Running(args, proc, applied, policy)


def _start(
    args: list[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stdin: str | None,
    policy: Policy | None,
) -> tuple[subprocess.Popen[str], Applied | None]:
    if policy is None:
        return _popen(args, cwd=cwd, env=env, stdin=stdin, preexec_fn=None), None
    return _start_sandboxed(args, cwd=cwd, env=env, stdin=stdin, policy=policy)


def _start_sandboxed(
    args: list[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stdin: str | None,
    policy: Policy,
) -> tuple[subprocess.Popen[str], Applied]:
    read_fd, write_fd = os.pipe()
    try:
        proc = _popen(
            args, cwd=cwd, env=env, stdin=stdin, preexec_fn=sandbox.child_setup(policy, write_fd)
        )
    except subprocess.SubprocessError:
        os.close(read_fd)
        if policy.network == SandboxNetwork.OFF:
            raise
        # the child raised before exec: it entered a user namespace but could not map its ids
        # (engine.isolation.sandbox); a missing network namespace must never fail a run
        without_network = replace(policy, network=SandboxNetwork.OFF)
        proc, applied = _start_sandboxed(
            args, cwd=cwd, env=env, stdin=stdin, policy=without_network
        )
        return proc, replace(applied, network="unavailable: user namespace setup failed")
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return proc, sandbox.read_report(policy, read_fd)


def _popen(
    args: list[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stdin: str | None,
    preexec_fn: Callable[[], None] | None,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


def _wait(
    proc: subprocess.Popen[str],
    stdin: str | None,
    deadline: float,
    resident_limit: int | None,
    done: Callable[[], bool] | None = None,
) -> tuple[str, str, str | None]:
    """The child's output and why it was killed (None: it ended by itself; "done": ``done``
    said its work is complete, and it has not been waited for)."""
    pending_input = stdin
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        wait = remaining if resident_limit is None else min(remaining, MEMORY_POLL_SECONDS)
        wait = wait if done is None else min(wait, DONE_POLL_SECONDS)
        try:
            out, err = proc.communicate(pending_input, timeout=wait)
            return out, err, None
        except subprocess.TimeoutExpired:
            pending_input = None  # communicate() keeps sending what it was given first
        except BaseException:  # KeyboardInterrupt: no child outlives the caller's wait
            kill_group(proc, grace=2.0)
            raise
        if done is not None and done():
            return "", "", "done"
        if time.monotonic() >= deadline:
            killed_for = "timeout"
        elif resident_limit is not None and sandbox.group_resident_bytes(proc.pid) > resident_limit:
            killed_for = "memory"
        else:
            continue
        # no grace period for a child over its memory: it may still be allocating
        kill_group(proc, grace=0.0 if killed_for == "memory" else 2.0)
        out, err = proc.communicate()
        return out, err, killed_for


def _reap_later(proc: subprocess.Popen[str], grace: float) -> None:
    """Waits for a child that is done but still exiting (its CUDA context torn down, say) in
    a daemon thread; its group is killed if it is not gone ``grace`` seconds later."""

    def reap() -> None:
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_group(proc, grace=0.0)
            proc.communicate()

    threading.Thread(target=reap, name=f"reap-{proc.pid}", daemon=True).start()


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


# -- stopping every child at once: a cancelled campaign, a worker shutting down -----------------
STOPPED = "stopped"  # ProcessResult.killed_for of a child ended (or never started) by stop_children
STOP_GRACE_SECONDS = 1.0  # SIGTERM, then SIGKILL of the whole group this much later

_lock = threading.Lock()
_waiting: dict[int, tuple[subprocess.Popen[str], threading.Event]] = {}
_stop_reason: str | None = None


def stopping() -> str | None:
    """Why children are being stopped in this process (None: they run)."""
    return _stop_reason


def stop_children(reason: str) -> int:
    """Kills the process group of every child this process is waiting for (``run``,
    ``Running.finish``): SIGTERM, then SIGKILL STOP_GRACE_SECONDS later. Until
    :func:`allow_children`, every later ``run``/``finish`` returns at once with ``killed_for``
    STOPPED, so a caller working through a batch ends within seconds. The waits it interrupts
    return STOPPED too. Process-wide: a Celery pool process runs one task at a time. Returns how
    many groups it signalled."""
    global _stop_reason
    with _lock:
        _stop_reason = reason
        waiting = list(_waiting.values())
    for _proc, stopped in waiting:
        stopped.set()
    procs = [proc for proc, _ in waiting]
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and any(proc.poll() is None for proc in procs):
        time.sleep(0.05)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return len(procs)


def allow_children() -> None:
    """Children may run again (the next task of the process)."""
    global _stop_reason
    with _lock:
        _stop_reason = None


@contextlib.contextmanager
def _waiting_on(proc: subprocess.Popen[str]) -> Iterator[threading.Event]:
    """Registers ``proc`` for stop_children while the caller waits for it; the event is set
    when stop_children signalled it."""
    stopped = threading.Event()
    with _lock:
        _waiting[proc.pid] = (proc, stopped)
        late = _stop_reason is not None  # stopped between the caller's check and here
    if late:
        stopped.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        yield stopped
    finally:
        with _lock:
            _waiting.pop(proc.pid, None)


def _not_started(args: list[str], reason: str, applied: Applied | None = None) -> ProcessResult:
    return ProcessResult(
        command=shlex.join(args),
        returncode=None,
        stdout="",
        stderr=f"not run: children are being stopped ({reason})",
        seconds=0.0,
        timed_out=False,
        killed_for=STOPPED,
        sandbox=applied,
    )


def truncate(text: str | None, limit: int = OUTPUT_LIMIT) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"
