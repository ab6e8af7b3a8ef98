"""The verifier's child process: loads one candidate and runs every check on the GPU.

Run as ``python -m engine.verify.gpu_checks SPEC.json VERDICT.json`` by engine.verify.verifier,
never in a worker: a crash, a hang or an illegal address ends this process only. The seed arrives in
GEMMFORGE_SEED and is removed from the environment before the candidate is loaded.

``... SPEC.json VERDICT.json --wait FIFO``: a warm verifier (engine.verify.verifier.WarmVerifier),
started before its candidate is known. It creates its CUDA context and cuBLAS handle (no kernel
runs; with ENGINE_VERIFY_WARM=kernels it also runs the checks' kernels once on a tiny problem),
then waits for a line on FIFO: "go" once SPEC.json is written, or the end of input (it was not
needed: it exits without a verdict).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.config import VerifyBusyStream, VerifyWarm
from engine.config import load as load_config
from engine.gpu import cuda_driver
from engine.gpu.runtime import KernelLibrary, LoadError
from engine.outcomes import Reason
from engine.problem import Layout, Problem
from engine.verify import numerics

GUARD_ELEMENTS = 16384  # fp16 elements of random guard band before and after every buffer
MAX_WORKSPACE_BYTES = 8 << 30
BUSY_CYCLES = 20_000_000  # ~10 ms: keeps the caller's stream busy while inputs are written
GATE_LIMIT_S = 2.0  # a gate the host has not opened by then is opened by its watchdog


@dataclass
class Check:
    name: str
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)


class Rejected(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise equality (random bit patterns include NaNs, which never compare equal)."""
    return torch.equal(x.view(torch.int16), y.view(torch.int16))


class Guarded:
    """A device buffer with random guard bands on both sides."""

    def __init__(self, numel: int, dtype: torch.dtype = torch.float16):
        self.numel = numel
        self.storage = torch.empty(numel + 2 * GUARD_ELEMENTS, dtype=dtype, device="cuda")
        self.guards: tuple[torch.Tensor, torch.Tensor] | None = None

    def randomize(self, gen: torch.Generator) -> None:
        """Random bits everywhere; the guard bands' copies to check them against."""
        dtype = self.storage.dtype
        self.storage.view(torch.int16 if dtype == torch.float16 else dtype).random_(generator=gen)
        self.guards = (self.front.clone(), self.back.clone())

    @property
    def front(self) -> torch.Tensor:
        return self.storage[:GUARD_ELEMENTS]

    @property
    def back(self) -> torch.Tensor:
        return self.storage[GUARD_ELEMENTS + self.numel :]

    @property
    def body(self) -> torch.Tensor:
        return self.storage[GUARD_ELEMENTS : GUARD_ELEMENTS + self.numel]

    def guards_intact(self) -> bool:
        if self.guards is None:
            raise RuntimeError("guards checked before the buffer was randomized")
        return same_bits(self.front, self.guards[0]) and same_bits(self.back, self.guards[1])


@dataclass
class Buffers:
    a: Guarded
    b: Guarded
    c: Guarded

    @classmethod
    def allocate(cls, problem: Problem) -> Buffers:
        """Allocated, not yet randomized (:meth:`randomize`)."""
        return cls(
            a=Guarded(problem.m * problem.k),
            b=Guarded(problem.k * problem.n),
            c=Guarded(problem.m * problem.n),
        )

    def randomize(self, gen: torch.Generator) -> None:
        for buffer in (self.a, self.b, self.c):
            buffer.randomize(gen)


def fill(tensor: torch.Tensor, distribution: str, gen: torch.Generator) -> None:
    if distribution == "normal":
        tensor.normal_(generator=gen)
    elif distribution == "uniform":
        tensor.uniform_(0.0, 1.0, generator=gen)
    elif distribution == "exact01":
        tensor.random_(0, 2, generator=gen)
    else:
        raise ValueError(f"unknown distribution {distribution}")


# Deterministic structured trials (besides the random ones): inputs a shortcut could be keyed on,
# or that break a kernel whose arithmetic is not what it claims. The exact ones have one nonzero
# product per output (C must equal B's rows bit for bit); the others are checked at the tolerance
# calibrated on cuBLAS with the same inputs.
STRUCTURED = (
    "zero_rows_cols",
    "zero_first",
    "identity",
    "permutation",
    "powers_of_two",
    "huge",
    "tiny",
)
EXACT_STRUCTURED = frozenset({"identity", "permutation"})
HUGE_MAX_FRACTION = 1 / 4  # huge: 5 standard deviations of C are a quarter of fp16's max
TINY_OUTPUT_STD = 2.0**-12  # tiny: C mostly below fp16's smallest normal (2^-14) × 4


def structured_inputs(
    pattern: str, m: int, n: int, k: int, gen: torch.Generator, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """A (M×K) and B (K×N) in fp16 on ``device`` (``gen``'s) for one structured trial."""
    opts: dict[str, Any] = {"device": device, "dtype": torch.float32}
    a = torch.randn(m, k, generator=gen, **opts)
    b = torch.randn(k, n, generator=gen, **opts)
    if pattern == "zero_rows_cols":
        a[torch.randperm(m, generator=gen, device=device)[: max(1, m // 8)]] = 0
        b[:, torch.randperm(n, generator=gen, device=device)[: max(1, n // 8)]] = 0
    elif pattern == "zero_first":
        a[0, 0] = 0
        b[0, 0] = 0
    elif pattern in EXACT_STRUCTURED:
        a.zero_()
        rows = torch.arange(m, device=device)
        if pattern == "identity":
            d = min(m, k)
            a[rows[:d], rows[:d]] = 1
        elif m <= k:
            a[rows, torch.randperm(k, generator=gen, device=device)[:m]] = 1
        else:
            a[rows, torch.randint(0, k, (m,), generator=gen, device=device)] = 1
    elif pattern == "powers_of_two":
        for x in (a, b):
            exponent = torch.randint(-3, 4, x.shape, generator=gen, device=device).float()
            x.copy_(torch.sign(x) * torch.exp2(exponent))
    elif pattern in ("huge", "tiny"):
        huge = numerics.FP16_MAX * HUGE_MAX_FRACTION / 5
        c_std = huge if pattern == "huge" else TINY_OUTPUT_STD
        scale = (c_std / k**0.5) ** 0.5
        a *= scale
        b *= scale
    else:
        raise ValueError(f"unknown structured pattern {pattern}")
    return a.half(), b.half()


class StreamGate:
    """Holds the caller's stream while a call's inputs are written and the call is made, as a
    busy stream would, without running anything on the GPU meanwhile: the stream waits
    (cuStreamWaitValue32) for a counter in pinned host memory, which :meth:`release` raises from
    the CPU once the call has returned. A ~10 ms sleep kernel did this before (still there as
    ENGINE_VERIFY_BUSY_STREAM=sleep); with 16 verifiers time-slicing one GPU those sleeps were
    most of the verification's GPU time (bench/NOTES.md §15).

    Loading a kernel for the first time may synchronise the context, which would wait for the
    held stream while the host waits for the load: every kernel launched while the gate is held
    is launched once before (Session.warm_up), and a watchdog thread opens a hold older than
    GATE_LIMIT_S anyway (counted in ``forced``)."""

    def __init__(self, driver: cuda_driver.Driver, counter: torch.Tensor | None = None) -> None:
        self.driver = driver
        self.counter = counter if counter is not None else pinned_counter()
        self.word = ctypes.c_int32.from_address(self.counter.data_ptr())
        self.generation = 0
        self.held_since: float | None = None
        self.forced = 0
        self.limit_s = GATE_LIMIT_S
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, name="stream-gate-watchdog", daemon=True).start()

    def hold(self, stream: torch.cuda.Stream) -> None:
        with self.lock:
            self.driver.stream_wait_value32(
                stream.cuda_stream, self.counter.data_ptr(), self.generation + 1
            )
            self.generation += 1
            self.held_since = time.monotonic()

    def release(self, *, forced: bool = False) -> None:
        with self.lock:
            if self.held_since is None:
                return
            self.word.value = self.generation
            self.held_since = None
            self.forced += forced

    def _watch(self) -> None:
        while True:
            time.sleep(0.05)
            since = self.held_since
            if since is not None and time.monotonic() - since > self.limit_s:
                self.release(forced=True)


def pinned_counter() -> torch.Tensor:
    return torch.zeros(1, dtype=torch.int32, pin_memory=True)


def new_gate() -> tuple[StreamGate | None, str]:
    """The gate, and how the busy stream is made ("gate", or "sleep" and why not a gate)."""
    if load_config().verify_busy_stream == VerifyBusyStream.SLEEP:
        return None, "sleep"
    try:
        return StreamGate(cuda_driver.Driver()), "gate"
    except cuda_driver.DriverError as exc:
        return None, f"sleep (no gate: {exc})"


class Session:
    def __init__(self, library: KernelLibrary, problem: Problem, seed: int) -> None:
        self.library = library
        self.problem = problem
        self.parts_s: dict[str, float] = {}  # where the set-up's time went (bench/NOTES.md §15)
        clock = time.monotonic()
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(seed)
        self.stream = torch.cuda.Stream()
        torch.cuda.synchronize()  # the context exists from here (the runtime creates it lazily)
        self.parts_s["session_context"] = round(time.monotonic() - clock, 3)
        clock = time.monotonic()
        self.checks: list[Check] = []
        workspace_bytes = library.workspace_size(problem.m, problem.n, problem.k)
        if workspace_bytes < 0 or workspace_bytes > MAX_WORKSPACE_BYTES:
            raise Rejected(Reason.WORKSPACE, f"asks for {workspace_bytes} bytes of workspace")
        self.workspace = Guarded((workspace_bytes + 1) // 2) if workspace_bytes else None
        self.primary = Buffers.allocate(problem)
        self.secondary = Buffers.allocate(problem)
        torch.cuda.synchronize()
        allocated = time.monotonic()
        if self.workspace is not None:
            self.workspace.randomize(self.gen)
        self.primary.randomize(self.gen)
        self.secondary.randomize(self.gen)
        torch.cuda.synchronize()  # the guard bands' random fill counts here, not in the checks
        self.parts_s["session_allocate"] = round(allocated - clock, 3)
        self.parts_s["session_fill"] = round(time.monotonic() - allocated, 3)
        self.parts_s["session_buffers"] = round(time.monotonic() - clock, 3)  # allocate + fill
        clock = time.monotonic()
        self.gate, self.busy_stream = new_gate()
        if self.gate is not None:
            self.warm_up()
        self.parts_s["session_warm_up"] = round(time.monotonic() - clock, 3)

    def warm_up(self) -> None:
        """Launches once each kernel that runs while the gate holds the stream (see
        StreamGate): the input fills, C's prefills and the copies."""
        with torch.cuda.stream(self.stream):
            for distribution in ("normal", "exact01", "uniform"):
                fill(self.secondary.a.body, distribution, self.gen)
            self.secondary.c.body.fill_(float("nan"))
            fill(self.secondary.c.body, "normal", self.gen)
            for buffer in (self.secondary.a, self.secondary.b, self.secondary.c):
                buffer.body.clone()
        torch.cuda.synchronize()

    def make_busy(self) -> None:
        """Keeps the stream from running what is enqueued next until :meth:`done_busy`."""
        if self.gate is not None:
            try:
                self.gate.hold(self.stream)
                return
            except cuda_driver.DriverError as exc:
                self.gate, self.busy_stream = None, f"sleep (no gate: {exc})"
        torch.cuda._sleep(BUSY_CYCLES)

    def done_busy(self) -> None:
        if self.gate is not None:
            self.gate.release()

    def reference(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        p = self.problem
        a2 = a.view(p.m, p.k).float()
        b2 = b.view(*p.b_shape).float()
        return a2 @ (b2 if p.layout is Layout.NN else b2.t())

    def library_result(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """cuBLAS's own fp16 answer with fp32 compute, for tolerance calibration."""
        p = self.problem
        a2, b2 = a.view(p.m, p.k), b.view(*p.b_shape)
        return a2 @ (b2 if p.layout is Layout.NN else b2.t())

    def call(
        self,
        buffers: Buffers,
        *,
        fill_inputs: Callable[[Buffers], None],
        c_prefill: str,
        busy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """One call as a user makes it: (C, C as the stream saw it at return, A, B, status)."""
        p = self.problem
        if not busy:
            torch.cuda.synchronize()
        # the harness's own earlier work on the default stream (the last trial's result copy)
        # is ordered before this call's window: the streams are not ordered with each other
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            if busy:
                self.make_busy()
            fill_inputs(buffers)
            if c_prefill == "nan":
                buffers.c.body.fill_(float("nan"))
            else:
                fill(buffers.c.body, "normal", self.gen)
            a_copy, b_copy = buffers.a.body.clone(), buffers.b.body.clone()
        if not busy:
            torch.cuda.synchronize()
        ws = self.workspace.body.data_ptr() if self.workspace else 0
        try:
            status = self.library.launch(
                buffers.a.body.data_ptr(),
                buffers.b.body.data_ptr(),
                buffers.c.body.data_ptr(),
                p.m,
                p.n,
                p.k,
                ws,
                self.stream.cuda_stream,
            )
        finally:
            if busy:
                self.done_busy()
        with torch.cuda.stream(self.stream):
            at_return = buffers.c.body.clone()
        torch.cuda.synchronize()
        if status != 0:
            raise Rejected(Reason.LAUNCH, f"gemmforge_hgemm returned error {status}")
        return buffers.c.body.view(p.m, p.n), at_return.view(p.m, p.n), a_copy, b_copy, status

    def trial(
        self,
        name: str,
        distribution: str,
        *,
        reason: str | None = None,
        c_prefill: str = "nan",
        busy: bool = True,
        buffers: Buffers | None = None,
        refill: bool = True,
    ) -> torch.Tensor:
        """Runs one call and every check on it; raises Rejected with the first failing reason."""
        buffers = buffers or self.primary
        started = time.monotonic()
        given = self.structured(distribution) if distribution in STRUCTURED else None

        def fill_inputs(target: Buffers) -> None:
            if given is not None:  # made before the stream is held: only copies run under it
                target.a.body.copy_(given[0])
                target.b.body.copy_(given[1])
            elif refill:
                fill(target.a.body, distribution, self.gen)
                fill(target.b.body, distribution, self.gen)

        out, at_return, a_copy, b_copy, _ = self.call(
            buffers, fill_inputs=fill_inputs, c_prefill=c_prefill, busy=busy
        )
        detail: dict[str, Any] = {
            "distribution": distribution,
            "busy_stream": self.busy_stream if busy else False,
        }
        ok = True
        try:
            self._check_integrity(buffers, a_copy, b_copy, out, at_return, reason)
            detail.update(self._check_values(out, a_copy, b_copy, distribution, reason))
        except Rejected as rejected:
            ok = False
            detail["failure"] = rejected.message
            raise
        finally:
            detail["seconds"] = round(time.monotonic() - started, 4)  # the checks sync: GPU work
            self.checks.append(Check(name, ok, detail))
        return out.clone()

    def structured(self, pattern: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B of a structured trial, flat as the buffers store them (B^T for TN)."""
        p = self.problem
        a, b = structured_inputs(pattern, p.m, p.n, p.k, self.gen)
        stored_b = b if p.layout is Layout.NN else b.t()
        return a.contiguous().view(-1), stored_b.contiguous().view(-1)

    def _check_integrity(self, buffers, a_copy, b_copy, out, at_return, reason) -> None:
        guarded = [("A", buffers.a), ("B", buffers.b), ("C", buffers.c)]
        if self.workspace is not None:
            guarded.append(("workspace", self.workspace))
        for label, buffer in guarded:
            if not buffer.guards_intact():
                raise Rejected(Reason.GUARD_BAND, f"wrote outside {label}")
        if not (same_bits(buffers.a.body, a_copy) and same_bits(buffers.b.body, b_copy)):
            raise Rejected(Reason.INPUT_MODIFIED, "changed A or B")
        if not same_bits(out, at_return):
            raise Rejected(
                reason or Reason.STREAM,
                "C changed after the call's work on the caller's stream ended",
            )
        bad = numerics.nonfinite_count(out)
        if bad:
            raise Rejected(
                reason or Reason.UNWRITTEN, f"{bad} elements of C not finite after the call"
            )

    def _check_values(self, out, a, b, distribution, reason) -> dict[str, Any]:
        ref = self.reference(a, b)
        if distribution == "exact01" or distribution in EXACT_STRUCTURED:
            mismatches = numerics.exact_mismatches(out, ref)
            if mismatches:
                raise Rejected(
                    reason or Reason.WRONG, f"{mismatches} elements differ on {distribution} inputs"
                )
            return {"mismatches": 0}
        if distribution == "uniform":
            report = numerics.ulp_report(out, ref)
            detail = {"max_ulp": report.max_ulp, "fraction_over_1ulp": report.fraction_over}
            if not report.ok:
                raise Rejected(
                    reason or Reason.PRECISION,
                    f"{report.max_ulp:.1f} ulp max error on U[0,1) inputs "
                    f"({report.fraction_over:.1%} of elements over 1 ulp): not fp32 accumulation",
                )
            return detail
        library_error = numerics.relative_frobenius_error(self.library_result(a, b), ref)
        tolerance = numerics.calibrated_tolerance(library_error)
        error = numerics.relative_frobenius_error(out, ref)
        detail = {"rel_error": error, "cublas_rel_error": library_error, "tolerance": tolerance}
        if not error <= tolerance:
            kind = Reason.PRECISION if error < 0.05 else Reason.WRONG
            raise Rejected(
                reason or kind,
                f"relative error {error:.3g} over tolerance {tolerance:.3g} "
                f"(cuBLAS: {library_error:.3g})",
            )
        return detail


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def run_checks(session: Session) -> dict[str, Any]:
    session.trial("synchronised call, N(0,1)", "normal", busy=False)
    threads = thread_count()
    session.trial("called as a user would (busy stream), N(0,1)", "normal", reason=Reason.STREAM)
    session.trial("exact 0/1 inputs", "exact01")
    session.trial("U[0,1) inputs, 1-ulp precision", "uniform")
    first = session.trial(
        "C prefilled with values", "normal", c_prefill="values", reason=Reason.C_DEPENDENT
    )
    # new pointers, same contents: copy the primary inputs into the secondary buffers, on the
    # caller's stream (the default stream is not ordered with it: a copy there raced the next
    # trial's snapshot of A and B once the busy stream no longer hid it behind 10 ms of sleep)
    with torch.cuda.stream(session.stream):
        session.secondary.a.body.copy_(session.primary.a.body)
        session.secondary.b.body.copy_(session.primary.b.body)
    second = session.trial(
        "new buffers, same contents", "normal", buffers=session.secondary, refill=False
    )
    # the primary buffers still hold the inputs of ``first``: the same call a third time
    third = session.trial("same buffers, same contents again", "normal", refill=False)
    deterministic = same_bits(first, second) and same_bits(first, third)
    if not deterministic:
        differ = int((first.view(torch.int16) != third.view(torch.int16)).sum()) or int(
            (first.view(torch.int16) != second.view(torch.int16)).sum()
        )
        raise Rejected(
            Reason.NONDETERMINISTIC,
            f"{differ} elements of C differ between calls on the same inputs",
        )
    for i in range(3):
        session.trial(f"same buffers, new contents #{i + 1}", "normal")
    for pattern in STRUCTURED:
        session.trial(
            f"structured: {pattern}",
            pattern,
            reason=Reason.PRECISION if pattern == "huge" else None,
        )
    if thread_count() > threads:
        raise Rejected(Reason.THREADS, f"started host threads ({threads} → {thread_count()})")
    return {"deterministic": deterministic}


def verify(spec: dict[str, Any], seed: int) -> dict[str, Any]:
    problem = Problem(spec["m"], spec["n"], spec["k"], Layout(spec["layout"]))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    started = time.monotonic()
    session: Session | None = None
    verdict: dict[str, Any] = {"ok": False, "reason": "", "message": "", "checks": []}
    # from the parent's launch to here: the interpreter, the sandbox's set-up and the imports
    verdict["startup_s"] = {"start": round(time.time() - spec.get("launched_at", time.time()), 3)}
    try:
        torch.cuda.init()
        verdict["startup_s"]["cuda_init"] = round(time.monotonic() - started, 3)
        clock = time.monotonic()
        library = KernelLibrary(spec["library"])
        loaded = round(time.monotonic() - clock, 3)
        session = Session(library, problem, seed)
        verdict["phases_s"] = {
            "session": round(time.monotonic() - clock, 3),
            "session_library": loaded,
            **session.parts_s,
        }
        clock = time.monotonic()
        verdict.update(run_checks(session))
        verdict["phases_s"]["checks"] = round(time.monotonic() - clock, 3)
        verdict.update(ok=True, reason=Reason.OK, message="all checks passed")
    except LoadError as exc:
        verdict.update(reason=Reason.LOAD, message=str(exc))
    except Rejected as rejected:
        verdict.update(reason=rejected.reason, message=rejected.message)
    except RuntimeError as exc:  # torch raises CUDA faults (illegal address, trap) as these
        if not any(word in str(exc) for word in ("CUDA", "cuda", "accelerator")):
            raise
        # out of GPU memory (torch's allocator, or a CUDA call): the parent decides whether
        # other verifiers held the memory
        reason = Reason.GPU_MEMORY if "out of memory" in str(exc) else Reason.RUNTIME_ERROR
        verdict.update(reason=reason, message=str(exc).splitlines()[0])
    if session is not None:
        verdict["checks"] = [vars(c) for c in session.checks]
        verdict["busy_stream"] = session.busy_stream
        if session.gate is not None and session.gate.forced:
            verdict["busy_stream"] += f" ({session.gate.forced} opened by its watchdog)"
    verdict["seconds"] = time.monotonic() - started
    return verdict


def warm_up_context(*, kernels: bool) -> None:
    """What a verifier can do before its candidate is known: create the process's CUDA context
    (≈ 0.12 s on the H200, one process at a time across the GPU, bench/NOTES.md §16) and the
    cuBLAS handle, which run no kernel; with ``kernels``, also :func:`warm_up_kernels`. A
    failure here recurs, and is reported, in :func:`verify`."""
    try:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the runtime creates the context at the first allocation
        torch.cuda.current_blas_handle()
        if kernels:
            warm_up_kernels("cuda")
        torch.cuda.synchronize()
    except Exception:  # no GPU, no driver: verify() meets it again and says so
        pass


WARM_UP_SIZE = 64  # M = N = K of warm_up_kernels' problem: a few microseconds of GPU work


def warm_up_kernels(device: str) -> None:
    """Runs once, on a tiny problem and in both layouts, what the checks run on their own
    tensors: the fills, C's prefills, the copies, the fp32 reference, cuBLAS's fp16 product and
    the comparisons. A kernel's first launch in a process loads it (lazy loading); here that
    happens before the candidate comes. The candidate's own kernels, and the GEMM kernels cuBLAS
    picks for the real shape, still load at their first use."""
    size = WARM_UP_SIZE
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    a = torch.empty(size, size, dtype=torch.float16, device=device)
    b = torch.empty(size, size, dtype=torch.float16, device=device)
    c = torch.empty(size, size, dtype=torch.float16, device=device)
    for distribution in ("normal", "exact01", "uniform"):
        fill(a, distribution, gen)
        fill(b, distribution, gen)
    c.fill_(float("nan"))
    fill(c, "normal", gen)
    for b_used in (b, b.t()):  # NN, and TN's transposed view of B
        reference = a.float() @ b_used.float()
        product = a.clone() @ b_used
        same_bits(product, product.clone())
        numerics.nonfinite_count(product)
        numerics.exact_mismatches(product, reference)
        numerics.ulp_report(product, reference)
        numerics.relative_frobenius_error(product, reference)


def wait_for_go(fifo: Path) -> bool:
    """True once the parent says "go"; False at the end of input (not needed)."""
    with fifo.open() as handle:
        return handle.readline().strip() == "go"


def main(argv: list[str]) -> int:
    spec_path, verdict_path = Path(argv[0]), Path(argv[1])
    seed = int(os.environ.pop("GEMMFORGE_SEED", "0"))
    warm: dict[str, float] = {}
    if argv[2:3] == ["--wait"]:
        clock = time.monotonic()
        warm_up_context(kernels=load_config().verify_warm == VerifyWarm.KERNELS)
        warm["warm"] = round(time.monotonic() - clock, 3)
        clock = time.monotonic()
        if not wait_for_go(Path(argv[3])):
            return 0
        warm["waited"] = round(time.monotonic() - clock, 3)
    spec = json.loads(spec_path.read_text())
    verdict = verify(spec, seed)
    verdict["startup_s"].update(warm)
    verdict_path.write_text(json.dumps(verdict, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
