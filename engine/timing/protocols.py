"""Timing protocols. Candidate and baselines run in one process, interleaved in random order.

Protocols:
  device   CUDA events around each call, L2 flushed before each call, repetitions until the
           median is known to ``target_rel_se`` (or the time budget ends); median and quantiles.
           The GPU's time alone: a spin kernel holds the stream while the runner's call is
           enqueued (Bench.hold_for_host_work), so a runner whose host work outlasts the flush
           (Inductor's guards and wrapper) leaves no idle GPU inside its interval.
  offline  CUDA-L2's offline mode: fresh inputs each iteration, host wall clock between device
           syncs around each call; mean TFLOP/s. Beside it, per runner, where that time goes:
           the call's own host time until it returns (``launch_host_s``) and CUDA-L2's event
           time, a start event recorded on the idle stream before the call (``event_s``).
  server   offline with exponential idle gaps between iterations (Poisson arrivals at ``qps``).
  graph    per-call time from CUDA-graph replay of ``calls_per_graph`` back-to-back calls.

L2 is flushed by zeroing a 256 MiB buffer (``l2_flush="write"``, the usual harnesses' flush): each
timed call then starts with L2 full of dirty lines, and a call that streams tens of MB spends
microseconds writing them back (8-10 us at 64 MB and more on an H100,
bench/results/2026-12-08-h100-longk-flush). ``l2_flush="read"`` sums the buffer instead, which
leaves L2 holding clean lines: a speedup that holds only after the writing flush is the flush's.

The verifier follows the kernel into the timed phase (engine.verify.timed_checks), in every
protocol: every timed call gets inputs no call saw before (new values, and the next of several
operand sets, so new pointers too) and a poisoned C, both written before the timed interval; a
random sample of each runner's calls is checked at the verification tolerance, and another sample is
timed against the host's clock and the caller's stream's completion (stream escape). Sampled
calls are not part of the statistics; what the checks cost is in each result's ``checks``.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.outcomes import Reason
from engine.problem import Layout, Problem
from engine.stats import TimingStats, summarize
from engine.timing import physics
from engine.timing.protocol_names import (
    L2_FLUSHES,
    PROTOCOLS,  # noqa: F401  (its old home; the names live there)
)
from engine.verify import numerics
from engine.verify import timed_checks as tc

L2_FLUSH_BYTES = 256 << 20
# A pause longer than this between two stretches of work ends a sustained load (Bench.heat_up):
# the runner set-up between an autotuning's timing and the heat-up takes milliseconds.
LOAD_GAP_S = 0.2
# A device run ends no sooner than this: under its power cap the H200's clocks wander over
# seconds, and runs that reached their precision target in 0.2 s had medians 2-4 % apart at
# 1024x4096x16384 (every runner together; NOTES §2), so a run spans that wandering.
DEVICE_MIN_SECONDS = 1.0
HEAT_POLL_S = 2e-4  # Bench.heat_while's sleep between looks at the GPU (a round queued behind)
# Bench.hold_for_host_work: the spin before a timed call lasts this many times the runner's
# recent host time per call (median of the last HOST_WORK_WINDOW) plus the margin, and
# HOST_WORK_FIRST_S before its host time is known. torch.cuda._sleep counts SM clock cycles:
# at SLEEP_CYCLES_PER_S (above the 1.98 GHz top SM clock of the H100 and H200) a spin lasts at
# least the seconds asked for.
HOST_WORK_FACTOR = 2.0
HOST_WORK_MARGIN_S = 20e-6
HOST_WORK_FIRST_S = 1e-3
HOST_WORK_WINDOW = 16
SLEEP_CYCLES_PER_S = 2.0e9
PREPARE_COST_SAMPLES = 5  # calls whose input refresh and C poison are timed with events


class RunnerError(RuntimeError):
    """A runner returned an error status while being timed."""


@dataclass
class Operands:
    """One input set: A, B in both layouts, and an output buffer."""

    a: torch.Tensor
    b_nn: torch.Tensor
    b_tn: torch.Tensor
    c: torch.Tensor

    @classmethod
    def random(cls, problem: Problem, gen: torch.Generator) -> Operands:
        m, n, k = problem.m, problem.n, problem.k
        ops = cls(
            a=torch.empty(m, k, dtype=torch.float16, device="cuda"),
            b_nn=torch.empty(k, n, dtype=torch.float16, device="cuda"),
            b_tn=torch.empty(n, k, dtype=torch.float16, device="cuda"),
            c=torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda"),
        )
        ops.refresh(gen)
        return ops

    def refresh(self, gen: torch.Generator) -> None:
        """New values in the same buffers (B in both layouts holds the same matrix)."""
        self.a.normal_(generator=gen)
        self.b_nn.normal_(generator=gen)
        self.b_tn.copy_(self.b_nn.t())

    def b(self, layout: Layout) -> torch.Tensor:
        return self.b_nn if layout is Layout.NN else self.b_tn

    def b_matrix(self, layout: Layout) -> torch.Tensor:
        """B as the K×N matrix a runner of ``layout`` multiplies by (a view)."""
        return self.b_nn if layout is Layout.NN else self.b_tn.t()

    def prepare(self, layout: Layout, gen: torch.Generator) -> None:
        """Before a timed call: new values in A and in the B that ``layout`` reads (what the
        call reads, no more: the same bytes as the kernel's own inputs), and C poisoned."""
        self.a.normal_(generator=gen)
        self.b(layout).normal_(generator=gen)
        self.c.fill_(float("nan"))


@dataclass
class Runner:
    """Something that computes C = A·B for one problem: a candidate or a baseline.

    ``launch(ops, stream_handle)`` enqueues the work on the stream and returns a status (0 = ok).
    """

    name: str
    kind: str  # "candidate" or a baseline's name (engine.timing.baseline_names.BASELINES)
    layout: Layout
    launch: Callable[[Operands, int], int]
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, ops: Operands, stream: torch.cuda.Stream) -> None:
        status = self.launch(ops, stream.cuda_stream)
        if status != 0:
            raise RunnerError(f"{self.name} returned status {status}")


@dataclass(frozen=True)
class OfflineCall:
    """One host-timed call of the offline protocol, seconds: ``wall`` from just before the call
    to the device sync after it (the protocol's time); ``launch_host``, until the call returned;
    ``event``, from a start event recorded on the idle stream before the call to an end event
    after it (CUDA-L2's own measure: the launch's host work and the GPU's)."""

    wall: float
    launch_host: float
    event: float


def offline_breakdown(calls: dict[str, list[OfflineCall]]) -> dict[str, Any]:
    """Per runner, the median launch host time and the median and mean event time (seconds)."""
    out: dict[str, dict[str, float]] = {"launch_host_s": {}, "event_s": {}, "event_mean_s": {}}
    for name, records in calls.items():
        if not records:
            continue
        out["launch_host_s"][name] = summarize([c.launch_host for c in records]).median
        events = summarize([c.event for c in records])
        out["event_s"][name] = events.median
        out["event_mean_s"][name] = events.mean
    return out


@dataclass
class ProtocolResult:
    protocol: str
    stats: dict[str, TimingStats]  # per runner name, seconds per call
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "stats": {name: s.to_dict() for name, s in self.stats.items()},
            **self.extra,
        }


class Bench:
    """Holds the operands, the stream and the L2 flush buffer for one problem.

    ``timed_checks`` False: the protocols as before the checks followed the kernel into the
    timed phase (two operand sets alternating, no poison, no sampled calls), for comparing
    baseline times with and without the checks only."""

    def __init__(
        self,
        problem: Problem,
        *,
        seed: int,
        input_sets: int | None = None,
        timed_checks: bool = True,
        l2_flush: str = "write",
    ) -> None:
        if l2_flush not in L2_FLUSHES:
            raise ValueError(f"l2_flush={l2_flush!r} is not one of {list(L2_FLUSHES)}")
        self.problem = problem
        self.l2_flush = l2_flush
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(seed)
        self.rng = random.Random(seed)
        self.stream = torch.cuda.Stream()
        self.timed_checks = timed_checks
        if input_sets is None:
            input_sets = tc.operand_set_count(problem, L2_FLUSH_BYTES) if timed_checks else 2
        self.operand_sets = [Operands.random(problem, self.gen) for _ in range(input_sets)]
        self.flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        self.flush_sum = torch.empty((), dtype=torch.int64, device="cuda")
        self.load: tuple[float, float] | None = None  # the last sustained load (monotonic s)
        self.calls = 0  # timed calls so far: the rotation over the operand sets
        self.gate: Any = None
        self.busy_stream = ""
        self.projection: torch.Tensor | None = None
        self.tolerance = 0.0
        self.library_errors: list[float] = []
        self.prepare_s_per_call = 0.0
        torch.cuda.synchronize()
        if timed_checks:
            self._set_up_checks()

    # -- the checks that follow the kernel into the timed phase (engine.verify.timed_checks) ---

    def _set_up_checks(self) -> None:
        """The projection the checks estimate C's error with, the tolerance (calibrated on
        cuBLAS with fp32 compute, as the verifier's), the stream gate, and every kernel the
        checks launch while the gate holds the stream, launched once."""
        from engine.verify.gpu_checks import new_gate

        n = self.problem.n
        self.projection = torch.randn(
            n, tc.PROJECTION_COLUMNS, generator=self.gen, device="cuda", dtype=torch.float64
        )
        reduced = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        try:
            for ops in self.operand_sets[:2]:
                for layout in (Layout.NN, Layout.TN):
                    ops.prepare(layout, self.gen)
                    b = ops.b_matrix(layout)
                    ops.c.copy_(ops.a @ b)
                    self.library_errors.append(self.projected_error(ops.c, ops.a, b))
        finally:
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = reduced
        self.tolerance = numerics.calibrated_tolerance(max(self.library_errors))
        self.gate, self.busy_stream = new_gate()
        with torch.cuda.stream(self.stream):
            for ops in self.operand_sets:
                ops.prepare(Layout.NN, self.gen)
                ops.prepare(Layout.TN, self.gen)
                self.flush_l2()
                ops.c.clone()
        torch.cuda.synchronize()
        self.prepare_s_per_call = self._prepare_cost()

    def _prepare_cost(self) -> float:
        """GPU seconds of one call's input refresh and C poison (median of a few, events)."""
        times = []
        ops = self.operand_sets[0]
        for _ in range(PREPARE_COST_SAMPLES):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            with torch.cuda.stream(self.stream):
                ops.prepare(self.problem.layout, self.gen)
            end.record(self.stream)
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        return sorted(times)[len(times) // 2]

    def projected_error(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
        """C's relative error against A·B (engine.verify.timed_checks.projected_error)."""
        assert self.projection is not None
        return tc.projected_error(c, a, b, self.projection)

    def next_operands(self) -> Operands:
        """The next operand set of the rotation: two consecutive calls never share buffers."""
        ops = self.operand_sets[self.calls % len(self.operand_sets)]
        self.calls += 1
        return ops

    def prepared(self, runner: Runner, log: tc.TimedLog | None) -> Operands:
        """The next operand set, refreshed and poisoned for ``runner`` on the bench's stream
        (before the L2 flush and the timed interval)."""
        ops = self.next_operands()
        if self.timed_checks:
            ops.prepare(runner.layout, self.gen)
            if log is not None:
                log.prepared_calls += 1
        return ops

    def new_log(self, runners: Sequence[Runner]) -> tc.TimedLog | None:
        if not self.timed_checks:
            return None
        log = tc.TimedLog(kinds={r.name: r.kind for r in runners})
        log.prepare_s_per_call = self.prepare_s_per_call
        return log

    def sampler(self, runners: Sequence[Runner], first_reps: int) -> tc.Sampler | None:
        if not self.timed_checks:
            return None
        names = [r.name for r in runners if r.kind not in tc.UNCHECKED_KINDS]
        return tc.Sampler(names, self.rng, first_reps=first_reps)

    def checked_call(self, runner: Runner, rep: int) -> tc.CheckRecord:
        """One call checked (engine.verify.timed_checks): the stream held while its inputs are
        written and it is called, C copied on the stream when the call's work there ends, then C
        after a device-wide sync compared with that copy and its error with the tolerance."""
        torch.cuda.synchronize()
        ops = self.next_operands()
        with torch.cuda.stream(self.stream):
            self._hold()
            try:
                ops.prepare(runner.layout, self.gen)
                self.flush_l2()
                runner(ops, self.stream)
                at_stream_end = ops.c.clone()
            finally:
                self._release()
        torch.cuda.synchronize()
        same = torch.equal(at_stream_end.view(torch.int16), ops.c.view(torch.int16))
        error = self.projected_error(ops.c, ops.a, ops.b_matrix(runner.layout))
        reason = tc.classify(same_at_stream_end=same, error=error, tolerance=self.tolerance)
        return tc.CheckRecord(rep, reason, error, self.tolerance, same)

    def probe_call(self, runner: Runner, rep: int) -> tc.ProbeRecord:
        """One call host-synchronised (engine.verify.timed_checks): its inputs written and L2
        flushed as for any timed call (still running when it is called), then the caller's stream's
        completion and the device's idle, each waited for by the host."""
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            ops = self.prepared(runner, None)
            self.flush_l2()
            start.record(self.stream)
            t0 = time.perf_counter()
            runner(ops, self.stream)
            host = time.perf_counter() - t0
            end.record(self.stream)
        end.synchronize()
        t_stream = time.perf_counter()
        torch.cuda.synchronize()
        t_idle = time.perf_counter()
        return tc.ProbeRecord(
            rep, start.elapsed_time(end) * 1e-3, t_stream - t0, t_idle - t_stream, host
        )

    def sampled(self, runner: Runner, kind: str, rep: int, log: tc.TimedLog) -> None:
        """Runs a checked or probed call and logs it (its time counts as the checks' cost)."""
        started = time.perf_counter()
        if kind == tc.CHECK:
            log.add_check(runner.name, self.checked_call(runner, rep))
        else:
            log.add_probe(runner.name, self.probe_call(runner, rep))
        log.sampled_s += time.perf_counter() - started

    def _hold(self) -> None:
        """Keeps the stream from running what is enqueued next until :meth:`_release`
        (engine.verify.gpu_checks.StreamGate), or a ~10 ms sleep kernel where no gate works."""
        if self.gate is not None:
            self.gate.hold(self.stream)
        else:
            torch.cuda._sleep(20_000_000)

    def _release(self) -> None:
        if self.gate is not None:
            self.gate.release()

    def loaded(self, start: float, end: float) -> None:
        """Notes that this bench kept the GPU busy from ``start`` to ``end`` (monotonic
        seconds); a stretch that follows the last one within LOAD_GAP_S extends it."""
        if self.load is not None and start - self.load[1] <= LOAD_GAP_S:
            self.load = (self.load[0], max(end, self.load[1]))
        else:
            self.load = (start, end)

    def idled(self) -> None:
        """Notes work that does not count as sustained load (syncs between calls, sleeps)."""
        self.load = None

    def sustained_load_s(self, now: float | None = None) -> float:
        """Seconds of sustained load this bench has just had the GPU under: 0 when the last
        stretch ended more than LOAD_GAP_S ago."""
        if self.load is None:
            return 0.0
        now = time.monotonic() if now is None else now
        if now - self.load[1] > LOAD_GAP_S:
            return 0.0
        return self.load[1] - self.load[0]

    def flush_l2(self) -> None:
        if self.l2_flush == "read":
            torch.sum(self.flush_buffer, dim=0, dtype=torch.int64, out=self.flush_sum)
        else:
            self.flush_buffer.zero_()

    def warm_up(self, runners: Sequence[Runner], calls: int = 3) -> None:
        started = time.monotonic()
        with torch.cuda.stream(self.stream):
            for runner in runners:
                for _ in range(calls):
                    runner(self.operand_sets[0], self.stream)
        torch.cuda.synchronize()
        self.loaded(started, time.monotonic())

    def heat_up(self, runners: Sequence[Runner], seconds: float = 3.0) -> float:
        """Runs the runners back to back so that clocks, power and temperature settle before
        timing (measured: without it, the first of three runs was 3-8 % faster).

        The GPU is to have been under load for ``seconds`` when this returns: load this bench
        has just put on it (an autotuning's timing, the warm-up right after it) counts, and
        only the rest runs. Returns the seconds it ran."""
        started = time.monotonic()
        needed = seconds - self.sustained_load_s(started)
        with torch.cuda.stream(self.stream):
            while time.monotonic() - started < needed:
                for runner in runners:
                    runner(self.operand_sets[0], self.stream)
                self.stream.synchronize()
        ended = time.monotonic()
        self.loaded(started, ended)
        return ended - started if needed > 0 else 0.0

    def heat_while(self, runners: Sequence[Runner], busy: Callable[[], bool]) -> float:
        """Runs the runners back to back for as long as ``busy()`` says, as load that a heat-up
        right after counts (see :meth:`heat_up`). Returns the seconds it ran.

        One round stays queued behind the one running, and this thread sleeps while it waits:
        a synchronize would spin a CPU core that the verifiers, running meanwhile, need."""
        started = time.monotonic()
        running: torch.cuda.Event | None = None
        with torch.cuda.stream(self.stream):
            while busy():
                for runner in runners:
                    runner(self.operand_sets[0], self.stream)
                queued = torch.cuda.Event()
                queued.record(self.stream)
                while running is not None and not running.query():
                    time.sleep(HEAT_POLL_S)
                running = queued
                self.loaded(started, time.monotonic())
        self.stream.synchronize()
        ended = time.monotonic()
        if running is not None:
            self.loaded(started, ended)
        return ended - started if running is not None else 0.0

    def heat_round(self, runners: Sequence[Runner]) -> float:
        """Each runner once, then a sync, as load (see :meth:`loaded`); returns when it ended."""
        started = time.monotonic()
        with torch.cuda.stream(self.stream):
            for runner in runners:
                runner(self.operand_sets[0], self.stream)
        self.stream.synchronize()
        ended = time.monotonic()
        self.loaded(started, ended)
        return ended

    def device(
        self,
        runners: Sequence[Runner],
        *,
        min_reps: int = 20,
        max_reps: int = 2000,
        target_rel_se: float = 0.002,
        max_seconds: float = 20.0,
        min_seconds: float = DEVICE_MIN_SECONDS,
    ) -> ProtocolResult:
        """CUDA events around each call, L2 flushed before each, interleaved in random order;
        until every median's relative standard error is under ``target_rel_se`` and at least
        ``min_seconds`` (capped by ``max_seconds``) have passed."""
        min_seconds = min(min_seconds, max_seconds)
        events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {
            r.name: [] for r in runners
        }
        samples: dict[str, list[float]] = {r.name: [] for r in runners}
        host = {r.name: deque[float](maxlen=HOST_WORK_WINDOW) for r in runners}
        log = self.new_log(runners)
        sampler = self.sampler(runners, min_reps)
        started = time.monotonic()
        rep = 0
        check_every = min_reps
        with torch.cuda.stream(self.stream):
            while rep < max_reps:
                order = list(runners)
                self.rng.shuffle(order)
                for runner in order:
                    kind = sampler.kind(runner.name, rep) if sampler else None
                    if kind is not None and log is not None:
                        self.sampled(runner, kind, rep, log)
                        continue
                    ops = self.prepared(runner, log) if log is not None else self._alternating(rep)
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    self.flush_l2()
                    self.hold_for_host_work(host[runner.name])
                    start.record(self.stream)
                    called = time.perf_counter()
                    runner(ops, self.stream)
                    host[runner.name].append(time.perf_counter() - called)
                    end.record(self.stream)
                    events[runner.name].append((start, end))
                rep += 1
                if rep % check_every == 0 or rep == max_reps:
                    self.stream.synchronize()
                    for name, pairs in events.items():
                        samples[name].extend(s.elapsed_time(e) * 1e-3 for s, e in pairs)
                        pairs.clear()
                    elapsed = time.monotonic() - started
                    done = elapsed >= min_seconds and all(
                        len(v) >= 2 and summarize(v).rel_se_median <= target_rel_se
                        for v in samples.values()
                    )
                    if done or elapsed > max_seconds:
                        break
        torch.cuda.synchronize()
        self.loaded(started, time.monotonic())
        stats = {name: summarize(values) for name, values in samples.items()}
        return ProtocolResult("device", stats, {"reps": rep, **self._checks_extra(log)})

    @staticmethod
    def hold_for_host_work(recent_host_s: Sequence[float]) -> None:
        """Enqueues a spin kernel on the current stream that outlasts the host work of the call
        about to be enqueued (its runner's ``recent_host_s`` per call): the start event after it
        is reached only once that call's GPU work is queued behind it, so the interval holds the
        GPU's time and none of the host's."""
        if recent_host_s:
            hold = HOST_WORK_FACTOR * statistics.median(recent_host_s) + HOST_WORK_MARGIN_S
        else:
            hold = HOST_WORK_FIRST_S
        torch.cuda._sleep(math.ceil(hold * SLEEP_CYCLES_PER_S))

    def _alternating(self, rep: int) -> Operands:
        """Without the timed checks: the operand sets in turn, one per rep, values unchanged."""
        return self.operand_sets[rep % len(self.operand_sets)]

    def _checks_extra(self, log: tc.TimedLog | None) -> dict[str, Any]:
        if log is None:
            return {}
        return {"timed_checks": log.to_dict(), "rejections": log.rejections()}

    def offline(
        self,
        runners: Sequence[Runner],
        *,
        iterations: int = 50,
        qps: float | None = None,
        max_seconds: float = 20.0,
    ) -> ProtocolResult:
        """Host wall clock between device syncs; fresh inputs each iteration; shuffled order.

        With ``qps``, exponential idle gaps precede each call (the paper's server mode).
        """
        calls: dict[str, list[OfflineCall]] = {r.name: [] for r in runners}
        log = self.new_log(runners)
        sampler = self.sampler(runners, iterations)
        started = time.monotonic()
        with torch.cuda.stream(self.stream):
            for iteration in range(iterations):
                order = list(runners)
                self.rng.shuffle(order)
                for runner in order:
                    kind = sampler.kind(runner.name, iteration) if sampler else None
                    if kind is not None and log is not None:
                        self.sampled(runner, kind, iteration, log)
                        continue
                    if log is not None:
                        ops = self.prepared(runner, log)
                    else:
                        ops = self.operand_sets[0]
                        ops.refresh(self.gen)
                    calls[runner.name].append(self.offline_call(runner, ops, qps))
                # a runner whose calls so far were all sampled has no time yet: one more round
                if time.monotonic() - started > max_seconds and all(calls.values()):
                    break
        self.idled()
        samples = {name: [c.wall for c in values] for name, values in calls.items()}
        stats = {name: summarize(values) for name, values in samples.items()}
        # CUDA-L2 reports the mean of per-iteration TFLOP/s
        mean_tflops = {
            name: sum(physics.tflops(self.problem, t) for t in values) / len(values)
            for name, values in samples.items()
        }
        protocol = "server" if qps else "offline"
        extra = {
            "mean_tflops": mean_tflops,
            "qps": qps,
            **offline_breakdown(calls),
            **self._checks_extra(log),
        }
        return ProtocolResult(protocol, stats, extra)

    def offline_call(self, runner: Runner, ops: Operands, qps: float | None) -> OfflineCall:
        """One host-timed call: the device idle (synchronised), then ``t0``, the call, its end
        event, a device sync. Everything the protocol does per call happens outside the interval
        and alike for every runner; inside it only the runner's own call (its host work included:
        what a launcher does on new buffers is part of its time) and the end event's record."""
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        if qps:
            time.sleep(self.rng.expovariate(qps))
        start.record(self.stream)
        t0 = time.perf_counter()
        runner(ops, self.stream)
        returned = time.perf_counter()
        end.record(self.stream)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        return OfflineCall(wall, returned - t0, start.elapsed_time(end) * 1e-3)

    def graph(
        self, runners: Sequence[Runner], *, calls_per_graph: int = 10, replays: int = 20
    ) -> ProtocolResult:
        """Per-call time from CUDA-graph replays (launch gaps removed, caches warm).

        With the timed checks, each call of a graph has an operand set of its own (so at most
        as many calls as sets), refreshed and poisoned before every replay, outside the timed
        interval; sampled replays are checked (every call's C) or probed, and left out."""
        stats: dict[str, TimingStats] = {}
        log = self.new_log(runners)
        sampler = self.sampler(runners, replays)
        if log is not None:
            calls_per_graph = min(calls_per_graph, len(self.operand_sets))
        sets = [self.operand_sets[i % len(self.operand_sets)] for i in range(calls_per_graph)]
        if log is None:
            sets = [self.operand_sets[0]] * calls_per_graph
        for runner in runners:
            graph = torch.cuda.CUDAGraph()
            capture_stream = torch.cuda.Stream()
            try:
                with torch.cuda.graph(graph, stream=capture_stream):
                    for ops in sets:
                        runner(ops, capture_stream)
                graph.replay()
                torch.cuda.synchronize()
            except (RunnerError, RuntimeError) as exc:
                if log is None:
                    raise
                # a launch outside the capturing stream (the legacy stream) breaks the capture
                reason = Reason.STREAM_ESCAPE if "captur" in str(exc).lower() else Reason.LAUNCH
                failed = tc.CheckRecord(0, reason, float("inf"), self.tolerance, False)
                log.add_check(runner.name, failed)
                torch.cuda.synchronize()
                continue
            times = []
            for replay in range(replays):
                if log is not None:
                    for ops in sets:
                        ops.prepare(runner.layout, self.gen)
                    log.prepared_calls += len(sets)
                kind = sampler.kind(runner.name, replay) if sampler else None
                if kind is not None and log is not None:
                    clock = time.perf_counter()
                    self._sampled_replay(graph, runner, sets, kind, replay, log)
                    log.sampled_s += time.perf_counter() - clock
                    continue
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / len(sets))
            stats[runner.name] = summarize(times)
            del graph
        self.idled()
        extra = {"calls_per_graph": len(sets), **self._checks_extra(log)}
        return ProtocolResult("graph", stats, extra)

    def _sampled_replay(
        self,
        graph: torch.cuda.CUDAGraph,
        runner: Runner,
        sets: Sequence[Operands],
        kind: str,
        replay: int,
        log: tc.TimedLog,
    ) -> None:
        """A checked replay (each call's C as the stream left it, then after a device sync) or
        a probed one (the replay's stream completion, then the device's idle)."""
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        graph.replay()
        host = time.perf_counter() - t0
        end.record()
        if kind == tc.PROBE:
            end.synchronize()
            t_stream = time.perf_counter()
            torch.cuda.synchronize()
            t_idle = time.perf_counter()
            event = start.elapsed_time(end) * 1e-3
            record = tc.ProbeRecord(replay, event, t_stream - t0, t_idle - t_stream, host)
            log.add_probe(runner.name, record)
            return
        copies = [ops.c.clone() for ops in sets]
        torch.cuda.synchronize()
        worst: tc.CheckRecord | None = None
        for ops, copy in zip(sets, copies, strict=True):
            same = torch.equal(copy.view(torch.int16), ops.c.view(torch.int16))
            error = self.projected_error(ops.c, ops.a, ops.b_matrix(runner.layout))
            reason = tc.classify(same_at_stream_end=same, error=error, tolerance=self.tolerance)
            record = tc.CheckRecord(replay, reason, error, self.tolerance, same)
            if worst is None or (worst.reason == Reason.OK and reason != Reason.OK):
                worst = record
        assert worst is not None
        log.add_check(runner.name, worst)

    def host_overhead(
        self, runners: Sequence[Runner], calls: int = 50
    ) -> dict[str, dict[str, float]]:
        """Host seconds per call to enqueue work while the GPU is busy (launch-path overhead):
        ``rotating``, the calls taking the operand sets in turn as the timed calls do (what a
        launcher whose host work depends on the buffers, like the sm90 one that initialises its
        operator again when they change, costs in the host-timed protocols); ``same_buffers``,
        every call on the first set (its cost when the buffers repeat)."""
        overhead: dict[str, dict[str, float]] = {"rotating": {}, "same_buffers": {}}
        first = self.operand_sets[:1]
        with torch.cuda.stream(self.stream):
            for runner in runners:
                torch.cuda._sleep(200_000_000)  # ~100 ms of GPU work ahead of the launches
                rotating = self._enqueue_seconds(runner, self.operand_sets, calls)
                runner(first[0], self.stream)  # the repeated buffers' first call sets them up
                same = self._enqueue_seconds(runner, first, calls)
                overhead["rotating"][runner.name] = rotating
                overhead["same_buffers"][runner.name] = same
                torch.cuda.synchronize()
        self.idled()  # measured: a run right after this probe was 4-8 % faster
        return overhead

    def _enqueue_seconds(self, runner: Runner, sets: Sequence[Operands], calls: int) -> float:
        """Host seconds per call of ``calls`` calls on ``sets`` in turn (the GPU busy)."""
        t0 = time.perf_counter()
        for call in range(calls):
            runner(sets[call % len(sets)], self.stream)
        return (time.perf_counter() - t0) / calls
