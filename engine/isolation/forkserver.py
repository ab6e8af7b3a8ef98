"""A fork server for sandboxed Python children that all import the same heavy modules.

A GPU step verifies each candidate in a process of its own (engine.verify.verifier). Started fresh,
every such process imports torch; sixteen of them at once on sixteen cores took 9-10 s of a 15 s
step on the H200 (bench/NOTES.md §12). Here one server process imports the modules once, never
initialising CUDA, and forks a child per request. Each child is still a process of its own, in a
session of its own, under the same sandbox as engine.isolation.processes.run gives it
(engine.isolation.sandbox: limits, network namespace, allow-listed environment, private HOME,
working directory), applied after the fork and before the module runs; the resident-memory watchdog
and the kill of the child's process group on timeout stay with the requester. The result is the same
engine.isolation.processes.ProcessResult a fresh process gives.

The requester talks to the server over two pipes, one JSON object per line:
``{"id", "module", "argv", "cwd", "env", "limits", "network", "stdout", "stderr"}`` in;
``{"id", "pid", "network"}`` once the child is set up, then ``{"id", "exit"}`` when it ends.
The server ends, killing its children, when its requests pipe closes (its requester died).

Run ``python -m engine.isolation.forkserver MODULE...`` only through :class:`ForkServer`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.config import SandboxNetwork
from engine.isolation import processes, sandbox
from engine.isolation.sandbox import Applied, Limits, Policy

FORKED = "(forked by engine.isolation.forkserver)"  # ends the command of every child forked here


class ForkServerDied(RuntimeError):
    """The server ended before it answered a request."""


class ForkServer:
    """Runs ``python -m MODULE ARGV...`` equivalents as children forked from one server process
    that imported ``preload`` first. Thread-safe; the server starts on the first :meth:`run`
    and ends on :meth:`close` (or when this process dies)."""

    def __init__(
        self,
        preload: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        python: str = sys.executable,
    ) -> None:
        self.preload = tuple(preload)
        self._argv = [python, "-m", "engine.isolation.forkserver", *self.preload]
        self._env = dict(env)
        self._cwd = cwd
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._started: dict[int, Future[dict[str, Any]]] = {}
        self._exited: dict[int, Future[int]] = {}
        self._next_id = 0
        self._dead: str | None = None

    @property
    def alive(self) -> bool:
        """Not closed, and its process (if started) still running."""
        proc = self._proc
        return self._dead is None and (proc is None or proc.poll() is None)

    def start(self) -> None:
        """Starts the server now (it imports its preloads meanwhile); :meth:`run` would anyway."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._proc is not None:
            return
        # The server stays in our process group: a kill of the group reaches it. Its stderr
        # goes to a file of its own: on our stderr it would hold the pipe our parent reads
        # until it exits, after us (0.5 s of every GPU step on the H200,
        # bench/results/2026-12-04-h200-run11).
        with (self._cwd / "forkserver.stderr").open("ab") as log:
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self._cwd,
                env=self._env,
            )
        threading.Thread(target=self._read_replies, name="forkserver-replies", daemon=True).start()

    def run(
        self,
        module: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        timeout: float,
        cwd: Path,
        env: Mapping[str, str],
        policy: Policy,
    ) -> processes.ProcessResult:
        """Runs ``module.main(argv)`` (its exit status) in a forked child under ``policy``: what
        ``python -m module argv...`` does for a module whose ``__main__`` block calls ``main``;
        never raises for the child's failure or timeout (that is in the result). Raises
        ForkServerDied when the server is gone, so that the caller can start the child fresh."""
        return self.spawn(module, argv, cwd=cwd, env=env, policy=policy).result(timeout)

    def spawn(
        self,
        module: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: Path,
        env: Mapping[str, str],
        policy: Policy,
    ) -> ForkedChild:
        """Forks the child of :meth:`run` now, to be waited for later with its own timeout
        (:meth:`ForkedChild.result`); raises ForkServerDied when the server is gone."""
        if policy.user_namespace:
            raise ValueError("the fork server runs GPU children: no user namespace")
        args = [os.fspath(a) for a in argv]
        stdout, stderr = cwd / f".{module}.stdout", cwd / f".{module}.stderr"
        set_up, exited = self._submit(
            {
                "module": module,
                "argv": args,
                "cwd": str(cwd),
                "env": dict(env),
                "limits": asdict(policy.limits),
                "network": policy.network,
                "stdout": str(stdout),
                "stderr": str(stderr),
            }
        )
        command = f"{shlex.join(['python', '-m', module, *args])} {FORKED}"
        return ForkedChild(command, policy, set_up, exited, stdout, stderr)

    def close(self) -> None:
        """Ends the server (its children still running are killed)."""
        with self._lock:
            proc, self._proc = self._proc, None
            self._dead = self._dead or "closed"
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- requester internals ---------------------------------------------------------------

    def _submit(self, request: dict[str, Any]) -> tuple[Future, Future]:
        with self._lock:
            if self._dead is not None:
                raise ForkServerDied(self._dead)
            self._start_locked()
            request_id = self._next_id
            self._next_id += 1
            set_up: Future[dict[str, Any]] = Future()
            exited: Future[int] = Future()
            self._started[request_id] = set_up
            self._exited[request_id] = exited
            line = json.dumps({"id": request_id, **request}).encode() + b"\n"
            try:
                self._proc.stdin.write(line)  # type: ignore[union-attr]
                self._proc.stdin.flush()  # type: ignore[union-attr]
            except OSError as exc:
                self._dead = f"fork server gone ({exc})"
                raise ForkServerDied(self._dead) from None
        return set_up, exited

    def _read_replies(self) -> None:
        proc = self._proc
        assert proc is not None
        assert proc.stdout is not None
        for line in proc.stdout:
            reply = json.loads(line)
            request_id = reply["id"]
            if "exit" in reply:
                self._exited.pop(request_id).set_result(int(reply["exit"]))
            elif "error" in reply:
                self._started.pop(request_id).set_exception(ForkServerDied(reply["error"]))
            else:
                self._started.pop(request_id).set_result(reply)
        code = proc.wait()
        with self._lock:
            self._dead = self._dead or f"fork server exited with status {code}"
            pending = [*self._started.values(), *self._exited.values()]
            self._started.clear()
            self._exited.clear()
        for future in pending:
            if not future.done():
                future.set_exception(ForkServerDied(self._dead))


class ForkedChild:
    """A child forked by a ForkServer, running (or set up to run) its module."""

    def __init__(
        self,
        command: str,
        policy: Policy,
        set_up: Future[dict[str, Any]],
        exited: Future[int],
        stdout: Path,
        stderr: Path,
    ) -> None:
        self.command = command
        self.policy = policy
        self._set_up = set_up
        self._exited = exited
        self._stdout = stdout
        self._stderr = stderr

    def result(self, timeout: float) -> processes.ProcessResult:
        """Waits up to ``timeout`` seconds from now for the child's end (then kills its process
        group): the same record a fresh process gives (engine.isolation.processes.ProcessResult)."""
        started = time.monotonic()
        deadline = started + timeout
        policy = self.policy
        try:
            child = self._set_up.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:  # the server is still importing: nothing of ours ran
            unavailable = Applied(policy.limits, "unavailable: not started")
            return processes.ProcessResult(
                self.command, None, "", "fork server not ready", time.monotonic() - started,
                True, killed_for="timeout", sandbox=unavailable,
            )  # fmt: skip
        returncode, killed_for = _wait_exit(
            child["pid"], self._exited, deadline, policy.limits.resident_bytes
        )
        if killed_for is None and returncode < 0:
            killed_for = processes.LIMIT_SIGNALS.get(-returncode)
        killed_here = killed_for in ("timeout", "memory")
        return processes.ProcessResult(
            command=self.command,
            returncode=None if killed_here else returncode,
            stdout=_read_output(self._stdout),
            stderr=_read_output(self._stderr),
            seconds=time.monotonic() - started,
            timed_out=killed_for == "timeout",
            killed_for=killed_for,
            sandbox=Applied(policy.limits, child["network"]),
        )

    def pid(self, timeout: float) -> int:
        """The child's pid, once forked (raises TimeoutError, ForkServerDied)."""
        return int(self._set_up.result(timeout=timeout)["pid"])

    def kill(self) -> None:
        """Kills the child's process group at once (a child nobody will wait for)."""
        with contextlib.suppress(TimeoutError, ForkServerDied):
            _kill_group(self.pid(timeout=10), self._exited, grace=0.0)


def _wait_exit(
    pid: int, exited: Future[int], deadline: float, resident_limit: int | None
) -> tuple[int, str | None]:
    """The child's exit code and why it was killed here (None: it ended by itself)."""
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        poll = processes.MEMORY_POLL_SECONDS
        wait = remaining if resident_limit is None else min(remaining, poll)
        try:
            return exited.result(timeout=wait), None
        except TimeoutError:
            pass
        except ForkServerDied:  # its children died with it
            return -signal.SIGKILL, None
        if time.monotonic() >= deadline:
            killed_for = "timeout"
        elif resident_limit is not None and sandbox.group_resident_bytes(pid) > resident_limit:
            killed_for = "memory"
        else:
            continue
        _kill_group(pid, exited, grace=0.0 if killed_for == "memory" else 2.0)
        try:
            return exited.result(timeout=30), killed_for
        except (TimeoutError, ForkServerDied):
            return -signal.SIGKILL, killed_for


def _kill_group(pgid: int, exited: Future[int], grace: float) -> None:
    """SIGTERM the child's session, ``grace`` seconds, then SIGKILL
    (engine.isolation.processes.kill_group for a child that is not ours to wait for: the server
    reaps it and says so)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError, ForkServerDied):
        exited.result(timeout=grace)
    if not exited.done():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _read_output(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(4 * processes.OUTPUT_LIMIT)
    except OSError:
        return ""
    return processes.truncate(data.decode(errors="replace"))


# -- the server ----------------------------------------------------------------------------------


def serve(preload: Sequence[str], requests_fd: int, replies_fd: int) -> None:
    """Imports ``preload``, then forks a child per request until the requests pipe closes."""
    for module in preload:
        importlib.import_module(module)
    replies = os.fdopen(replies_fd, "wb", buffering=0)
    children: dict[int, int] = {}  # pid -> request id
    pending = b""
    while True:
        readable, _, _ = select.select([requests_fd], [], [], 0.05)
        if readable:
            chunk = os.read(requests_fd, 1 << 16)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                try:
                    pid, network = fork_child(request, requests_fd, replies_fd)
                except OSError as exc:
                    _reply(replies, {"id": request["id"], "error": f"fork failed: {exc}"})
                    continue
                children[pid] = request["id"]
                _reply(replies, {"id": request["id"], "pid": pid, "network": network})
        _reap(children, replies)
    for pid in children:  # the requester is gone: so is the reason to run
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _reap(children: dict[int, int], replies: Any) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id = children.pop(pid, None)
        if request_id is not None:
            _reply(replies, {"id": request_id, "exit": os.waitstatus_to_exitcode(status)})


def _reply(replies: Any, reply: dict[str, Any]) -> None:
    replies.write(json.dumps(reply).encode() + b"\n")


def fork_child(request: dict[str, Any], *server_fds: int) -> tuple[int, str]:
    """Forks the request's child; returns its pid and the network it got, once it is set up
    (in its own session, sandboxed) and about to run its module."""
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(report_r)
        _run_child(request, report_w, server_fds)
    os.close(report_w)
    network = b""
    while chunk := os.read(report_r, 256):
        network += chunk
    os.close(report_r)
    return pid, network.decode(errors="replace") or "unavailable: no report from the child"


def _run_child(request: dict[str, Any], report_fd: int, server_fds: Sequence[int]) -> None:
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in server_fds:
            os.close(fd)
        _redirect(request)
        policy = Policy(Limits(**request["limits"]), network=SandboxNetwork(request["network"]))
        sandbox.child_setup(policy, report_fd)()
        os.close(report_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # TMPDIR changed: tempfile must look again
        sys.argv = [request["module"], *request["argv"]]
        code = importlib.import_module(request["module"]).main(list(request["argv"])) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect(request: dict[str, Any]) -> None:
    """stdin from /dev/null, stdout and stderr to the request's files."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)


def main(argv: Sequence[str]) -> int:
    # The requester's end decides when the server ends (its requests pipe closes), not a
    # Ctrl-C or a `timeout -s INT` sent to the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # replies on a private copy of stdout; fd 1 becomes stderr, so that nothing printed by a
    # preload or a child before its redirect can corrupt the replies
    replies_fd = os.dup(1)
    os.dup2(2, 1)
    serve(list(argv), 0, replies_fd)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # no teardown of torch's modules: nobody waits for it
