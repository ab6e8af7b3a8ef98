"""Verification of a compiled kernel library, in a separate process per candidate.

A crash, a hang or an illegal address ends the child (engine.verify.gpu_checks), never the caller.
Every rejection carries a reason (engine.outcomes.Reason, described in REASONS) and a message.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import VERIFY_MPS_PIPE_VARIABLE, verify_mps_pipe
from engine.config import load as load_config
from engine.gpu import cuda_driver
from engine.isolation import processes, sandbox
from engine.isolation.forkserver import ForkedChild, ForkServer, ForkServerDied
from engine.outcomes import Reason
from engine.problem import Problem

CHILD_MODULE = "engine.verify.gpu_checks"
# One verification child's device memory, fitted on the H200 (bench/results/2026-12-04-h200-run11:
# 6.9 GB per child at 12288×12288×1024, 8.9 GB at 16384×12288×512): its CUDA context and allocator
# slack, ~22 times C's fp16 bytes (guarded buffers, the fp32 reference, the comparisons'
# temporaries), ~8 times A's and B's. Sixteen at once ran the H200 out of memory on the largest grid
# shapes.
CHILD_BASE_BYTES = 768 << 20
VERIFIERS_GPU_SHARE = 0.6  # of the GPU's memory; the rest is the measuring process's


def child_gpu_bytes(problem: Problem) -> int:
    m, n, k = problem.m, problem.n, problem.k
    return CHILD_BASE_BYTES + 22 * 2 * m * n + 8 * 2 * (m * k + k * n)


def jobs_for_memory(problem: Problem, jobs: int, gpu_bytes: int | None) -> int:
    """``jobs``, fewer where that many children of this shape would not fit the GPU's memory
    (``gpu_bytes``: its total; None: unknown, no cap)."""
    if gpu_bytes is None:
        return jobs
    return max(1, min(jobs, int(gpu_bytes * VERIFIERS_GPU_SHARE) // child_gpu_bytes(problem)))


REASONS = {
    Reason.OK: "passed every check",
    Reason.LOAD: "the library cannot be loaded, lacks an ABI symbol or has another ABI version",
    Reason.WORKSPACE: "asks for an unreasonable workspace",
    Reason.LAUNCH: "gemmforge_hgemm returned an error",
    Reason.RUNTIME_ERROR: "a CUDA fault during the call (illegal address, trap, misaligned access)",
    Reason.CRASH: "the verifier process died without a verdict",
    Reason.TIMEOUT: "did not finish in time (hang or far too slow)",
    Reason.MEMORY: "went over the verifier's host memory limit",
    Reason.UNWRITTEN: "left elements of C unwritten or not finite",
    Reason.WRONG: "wrong values",
    Reason.PRECISION: "error beyond fp32 accumulation (e.g. fp16 accumulation)",
    Reason.GUARD_BAND: "wrote outside its buffers",
    Reason.INPUT_MODIFIED: "changed its inputs",
    Reason.STREAM: "work escaped the caller's stream (wrong or late when called as a user would)",
    Reason.C_DEPENDENT: "the result depends on C's previous contents",
    Reason.NONDETERMINISTIC: "repeated calls on the same inputs gave different bits",
    Reason.STREAM_ESCAPE: "while timed, work ran outside the caller's stream (it ended later)",
    Reason.THREADS: "started host threads",
    Reason.GPU_MEMORY: "ran out of GPU memory, alone on the GPU",
    Reason.STATIC_SIZE: "source over the size limit",
    Reason.STATIC_INCLUDE: "includes a header outside the allow-list",
    Reason.STATIC_API: "source names a forbidden API (regex pre-filter)",
    Reason.STATIC_SYMBOLS: "the built library imports a symbol outside the allow-list",
}


# What one MPS client's fatal fault does to the others (engine.gpu.mps): their calls fail, or
# they die
MPS_SHARED_FAULTS = frozenset({Reason.RUNTIME_ERROR, Reason.CRASH, Reason.LAUNCH})


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    reason: str
    message: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    deterministic: bool | None = None
    stderr_tail: str = ""
    startup_s: dict[str, float] = field(default_factory=dict)  # the child's start, CUDA init
    phases_s: dict[str, float] = field(default_factory=dict)  # then its session set-up, checks
    busy_stream: str = ""  # how the busy-stream trials held the stream (verify_child.new_gate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "checks": self.checks,
            "seconds": self.seconds,
            "deterministic": self.deterministic,
            "stderr_tail": self.stderr_tail,
            "startup_s": self.startup_s,
            "phases_s": self.phases_s,
            "busy_stream": self.busy_stream,
        }


def verify(
    library: Path,
    problem: Problem,
    *,
    timeout: float = processes.Timeout.VERIFY,
    seed: int | None = None,
    python: str = sys.executable,
    fork_server: ForkServer | None = None,
    mps_pipe: str | None = None,
) -> VerifyResult:
    """Runs every check on ``library`` for ``problem`` in a child process: forked from
    ``fork_server`` when given (and alive), else started fresh; a client of the MPS daemon
    whose pipe folder is ``mps_pipe`` (engine.gpu.mps) when given."""
    with tempfile.TemporaryDirectory(prefix="gemmforge-verify-") as workdir:
        spec_path = Path(workdir) / "spec.json"
        verdict_path = Path(workdir) / "verdict.json"
        env = child_env(Path(workdir), seed=seed, mps_pipe=mps_pipe)
        write_spec(spec_path, library, problem)
        child = {
            "timeout": timeout,
            "cwd": Path(workdir),
            "env": env,
            "policy": sandbox.gpu_policy(),
        }
        result = None
        if fork_server is not None:
            try:
                result = fork_server.run(CHILD_MODULE, [spec_path, verdict_path], **child)
            except ForkServerDied:
                result = None  # started fresh below
        if result is None:
            result = processes.run([python, "-m", CHILD_MODULE, spec_path, verdict_path], **child)
        return interpret(result, verdict_path, timeout)


def child_env(workdir: Path, *, seed: int | None, mps_pipe: str | None) -> dict[str, str]:
    """A verification child's environment: engine.isolation.sandbox's for an engine child, its seed,
    and the MPS daemon's pipe folder when it is to be a client (the server runs on the verifier's
    GPU alone, engine.gpu.mps.start)."""
    env = sandbox.engine_child_env(workdir)
    env["GEMMFORGE_SEED"] = str(seed if seed is not None else secrets.randbits(63))
    env.pop(VERIFY_MPS_PIPE_VARIABLE, None)
    if mps_pipe:
        env.update(CUDA_MPS_PIPE_DIRECTORY=mps_pipe, CUDA_VISIBLE_DEVICES="0")
    return env


def write_spec(path: Path, library: Path, problem: Problem) -> None:
    """What the child verifies, and when it was asked to (its start-up counts from there)."""
    spec = {
        "library": str(Path(library).resolve()),
        "m": problem.m,
        "n": problem.n,
        "k": problem.k,
        "layout": problem.layout.value,
        "launched_at": time.time(),
    }
    path.write_text(json.dumps(spec))


class WarmVerifier:
    """A verification child forked before its candidate is known (``engine.verify.gpu_checks
    --wait``): it creates its CUDA context, running no kernel, while the GPU does other work,
    then verifies exactly one library when :meth:`verify` hands it one. Still one process per
    candidate, under the same sandbox as any verification child."""

    def __init__(self, fork_server: ForkServer, *, mps_pipe: str | None = None) -> None:
        self.mps_pipe = mps_pipe
        self._folder = tempfile.TemporaryDirectory(prefix="gemmforge-verify-")
        workdir = Path(self._folder.name)
        self.spec_path, self.verdict_path = workdir / "spec.json", workdir / "verdict.json"
        go = workdir / "go"
        os.mkfifo(go, 0o600)
        # Held read-write until the verdict: opening it never blocks, and what is written stays
        # in the pipe even when the child opens it later (a FIFO with no open end drops it).
        self._go: int | None = os.open(go, os.O_RDWR)
        try:
            self._child: ForkedChild | None = fork_server.spawn(
                CHILD_MODULE,
                [self.spec_path, self.verdict_path, "--wait", go],
                cwd=workdir,
                env=child_env(workdir, seed=None, mps_pipe=mps_pipe),
                policy=sandbox.gpu_policy(),
            )
        except BaseException:
            self._release()
            raise

    def verify(
        self, library: Path, problem: Problem, *, timeout: float = processes.Timeout.VERIFY
    ) -> VerifyResult:
        """``library``'s verdict; the child's time limit counts from now."""
        child, self._child = self._child, None
        if child is None or self._go is None:
            raise RuntimeError("a warm verifier verifies one library, once")
        try:
            write_spec(self.spec_path, library, problem)
            os.write(self._go, b"go\n")
            return interpret(child.result(timeout), self.verdict_path, timeout)
        finally:
            self._release()

    def pid(self, timeout: float = 60.0) -> int:
        """The child's pid, once forked (its fork server may still be importing)."""
        if self._child is None:
            raise RuntimeError("this warm verifier's child has been used or discarded")
        return self._child.pid(timeout)

    def discard(self) -> None:
        """Ends the child unused (it holds a CUDA context and nothing else)."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
        self._release()

    def _release(self) -> None:
        if self._go is not None:
            os.close(self._go)
            self._go = None
        self._folder.cleanup()


class WarmPool:
    """Warm verifiers for a batch not yet known, forked now (``count`` of them, all clients of
    the MPS daemon whose pipe folder is ``mps_pipe``, or none): started while the GPU times the
    batch before, so that their contexts' creation (one process at a time on the H200's driver,
    bench/NOTES.md §16) is off the next batch's critical path. Verifications(warm=...) takes
    them one per candidate; :meth:`close` ends those left."""

    def __init__(self, fork_server: ForkServer, count: int, *, mps_pipe: str | None = None) -> None:
        self.mps_pipe = mps_pipe
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._ready: deque[WarmVerifier] = deque()
        self.taken = 0
        for _ in range(count):
            try:
                self._ready.append(WarmVerifier(fork_server, mps_pipe=mps_pipe))
            except ForkServerDied:
                break  # the batch forks its children fresh, as without a pool

    @classmethod
    def for_this_process(cls, fork_server: ForkServer, count: int) -> WarmPool:
        """Warm verifiers that are MPS clients exactly when this process's verifications are
        (the daemon in the ENGINE_VERIFY_MPS_PIPE variable, engine.gpu.mps)."""
        return cls(fork_server, count, mps_pipe=verify_mps_pipe())

    def __len__(self) -> int:
        return len(self._ready)

    def pids(self) -> list[int]:
        """The pids of the warm verifiers not yet taken."""
        with self._lock:
            ready = list(self._ready)
        return [verifier.pid() for verifier in ready]

    def take(self) -> WarmVerifier | None:
        """A warm verifier for one candidate; None when none is left."""
        with self._lock:
            if not self._ready:
                return None
            self.taken += 1
            return self._ready.popleft()

    def close(self) -> None:
        """Ends the warm verifiers nobody took."""
        with self._lock:
            left, self._ready = list(self._ready), deque()
        for verifier in left:
            verifier.discard()


def fork_server_on() -> bool:
    return load_config().verify_fork_server


def new_fork_server(*, start: bool) -> tuple[ForkServer, tempfile.TemporaryDirectory[str]]:
    """A fork server for verification children and the private folder it runs in (its HOME,
    TMPDIR and working directory); started now (it imports torch meanwhile) or on first use."""
    folder = tempfile.TemporaryDirectory(prefix="gemmforge-forkserver-")
    workdir = Path(folder.name)
    server = ForkServer([CHILD_MODULE], env=sandbox.engine_child_env(workdir), cwd=workdir)
    if start:
        server.start()
    return server, folder


class Verifications:
    """A batch's verifications, started at once: one child process per library (never two
    libraries in one child), up to ``jobs`` of them running together, forked from one fork
    server (engine.isolation.forkserver) unless ``fork_server`` is False or
    ENGINE_VERIFY_FORK_SERVER is off; ``fork_server`` may also be a server the caller started (and
    ends) itself. The caller does other work meanwhile and collects the verdicts, in the libraries'
    order, with :meth:`results`. No more children run at once than the GPU's memory holds for the
    shape (:func:`jobs_for_memory`), and a child that still ran out of GPU memory among others is
    verified again, alone, before its verdict counts.

    With an MPS daemon running for verification (``mps_pipe``; by default the pipe folder in
    the ENGINE_VERIFY_MPS_PIPE variable, engine.gpu.mps), the children are its clients and run on
    the GPU concurrently. A fatal fault of one client reaches every client of the server (on
    the H200 a trapping kernel took all 16 down: bench/results/2026-12-04-h200-run13/), so when
    a child of such a batch faulted, every faulted or crashed verdict is verified again outside
    MPS before it counts.

    ``warm``: a WarmPool started for this batch: each child is one of its warm verifiers while
    any is left (their MPS choice is the batch's); the pool is this object's to close."""

    def __init__(
        self,
        libraries: Sequence[Path],
        problem: Problem,
        *,
        jobs: int = 1,
        timeout: float | None = None,
        fork_server: bool | ForkServer | None = None,
        gpu_bytes: int | None = None,
        mps_pipe: str | None = None,
        warm: WarmPool | None = None,
    ) -> None:
        self.libraries = [Path(p) for p in libraries]
        self.warm = warm
        self.problem = problem
        self.started = time.monotonic()
        self._done: list[float] = []  # when each child's verdict came (list.append is atomic)
        kwargs: dict[str, Any] = {"timeout": timeout} if timeout else {}
        if fork_server is None:
            fork_server = fork_server_on()
        self._server_dir: tempfile.TemporaryDirectory[str] | None = None
        self._server: ForkServer | None = None  # ours to end
        if isinstance(fork_server, ForkServer):
            kwargs["fork_server"] = fork_server
        elif fork_server and self.libraries:
            self._server, self._server_dir = new_fork_server(start=False)
            kwargs["fork_server"] = self._server
        if mps_pipe is None:
            mps_pipe = verify_mps_pipe()
        self.mps_pipe = mps_pipe if len(self.libraries) > 1 else None  # MPS serves no lone child
        if warm is not None:
            self.mps_pipe = warm.mps_pipe
        if self.mps_pipe:
            kwargs["mps_pipe"] = self.mps_pipe
        self._kwargs = kwargs
        if gpu_bytes is None and len(self.libraries) > 1:
            gpu_bytes = cuda_driver.device_total_memory()
        self.jobs = jobs_for_memory(problem, max(1, min(jobs, len(self.libraries))), gpu_bytes)
        self.retried_alone = 0
        self.retried_outside_mps = 0
        self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="verify")
        self._futures: list[Future[VerifyResult]] = [
            self._pool.submit(self._verify, p, problem, kwargs) for p in self.libraries
        ]
        self._pool.shutdown(wait=False)

    def _verify(self, library: Path, problem: Problem, kwargs: dict[str, Any]) -> VerifyResult:
        try:
            warm = self.warm.take() if self.warm is not None and kwargs is self._kwargs else None
            if warm is None:
                return verify(library, problem, **kwargs)
            return warm.verify(
                library, problem, timeout=kwargs.get("timeout", processes.Timeout.VERIFY)
            )
        finally:
            self._done.append(time.monotonic())

    def running(self) -> bool:
        """Some child has not given its verdict yet."""
        return not all(f.done() for f in self._futures)

    def results(self) -> list[VerifyResult]:
        """Every verdict (waits for the children still running); ends the fork server."""
        try:
            verdicts = [f.result() for f in self._futures]
            if self.mps_pipe is not None and any(v.reason in MPS_SHARED_FAULTS for v in verdicts):
                self._again_outside_mps(verdicts)
            for i, verdict in enumerate(verdicts):
                if verdict.reason == Reason.GPU_MEMORY and self.jobs > 1:  # others held memory too
                    verdicts[i] = self._verify(self.libraries[i], self.problem, self._kwargs)
                    self.retried_alone += 1
            return verdicts
        finally:
            self.close()

    def _again_outside_mps(self, verdicts: list[VerifyResult]) -> None:
        """Verifies every faulted or crashed child of the batch again, as many at once as
        before, each with a context of its own (one fault cannot reach the others), in place."""
        again = [i for i, v in enumerate(verdicts) if v.reason in MPS_SHARED_FAULTS]
        outside = {k: v for k, v in self._kwargs.items() if k != "mps_pipe"}
        with ThreadPoolExecutor(self.jobs, thread_name_prefix="verify-again") as pool:
            redone = list(
                pool.map(lambda i: self._verify(self.libraries[i], self.problem, outside), again)
            )
        for i, verdict in zip(again, redone, strict=True):
            verdicts[i] = verdict
        self.retried_outside_mps += len(again)

    def close(self) -> None:
        """Ends the fork server and the warm verifiers left, once every child has given its
        verdict."""
        if not all(f.done() for f in self._futures):
            return
        if self.warm is not None:
            self.warm.close()
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._server_dir is not None:
            self._server_dir.cleanup()
            self._server_dir = None

    @property
    def warm_used(self) -> int:
        """Children that were warm verifiers."""
        return self.warm.taken if self.warm is not None else 0

    @property
    def seconds(self) -> float | None:
        """From the start to the last verdict (None while a child still runs)."""
        if len(self._done) < len(self._futures):
            return None
        return max(self._done, default=self.started) - self.started


def interpret(result: processes.ProcessResult, verdict_path: Path, timeout: float) -> VerifyResult:
    """Turns the child's exit and side-channel verdict into a result record."""
    tail = result.stderr[-4000:]
    if result.timed_out:
        return VerifyResult(
            False,
            Reason.TIMEOUT,
            f"no verdict within {timeout:.0f} s",
            seconds=result.seconds,
            stderr_tail=tail,
        )
    if result.killed_for == "memory":
        limit = result.sandbox.limits.describe() if result.sandbox else "its limits"
        return VerifyResult(
            False,
            Reason.MEMORY,
            f"killed over its host memory limit ({limit})",
            seconds=result.seconds,
            stderr_tail=tail,
        )
    if result.returncode != 0 or not verdict_path.exists():
        return VerifyResult(
            False,
            Reason.CRASH,
            f"verifier exited with status {result.returncode} and no verdict",
            seconds=result.seconds,
            stderr_tail=tail,
        )
    verdict = json.loads(verdict_path.read_text())
    return VerifyResult(
        ok=bool(verdict["ok"]),
        reason=str(verdict["reason"]),
        message=str(verdict["message"]),
        checks=list(verdict.get("checks", [])),
        seconds=float(verdict.get("seconds", result.seconds)),
        deterministic=verdict.get("deterministic"),
        stderr_tail=tail,
        startup_s=dict(verdict.get("startup_s", {})),
        phases_s=dict(verdict.get("phases_s", {})),
        busy_stream=str(verdict.get("busy_stream", "")),
    )
