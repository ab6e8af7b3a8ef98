"""Timing protocols. Candidate and baselines run in one process, interleaved in random order.

Protocols:
  device   CUDA events around each call, L2 flushed before each call, repetitions until the
           median is known to ``target_rel_se`` (or the time budget ends); median and quantiles.
  offline  CUDA-L2's offline mode: fresh inputs each iteration, host wall clock between device
           syncs around each call; mean TFLOP/s.
  server   offline with exponential idle gaps between iterations (Poisson arrivals at ``qps``).
  graph    per-call time from CUDA-graph replay of ``calls_per_graph`` back-to-back calls.

Every runner's output is checked after each protocol on fresh inputs, so a kernel that behaves
differently while timed is caught (docs/verification.md rows 3 and 4).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from engine import numerics, physics
from engine.problem import Layout, Problem
from engine.stats import TimingStats, summarize

L2_FLUSH_BYTES = 256 << 20
# A pause longer than this between two stretches of work ends a sustained load (Bench.heat_up):
# the runner set-up between an autotuning's timing and the heat-up takes milliseconds.
LOAD_GAP_S = 0.2
# A device run ends no sooner than this: under its power cap the H200's clocks wander over
# seconds, and runs that reached their precision target in 0.2 s had medians 2-4 % apart at
# 1024x4096x16384 (every runner together; NOTES §2), so a run spans that wandering.
DEVICE_MIN_SECONDS = 1.0
HEAT_POLL_S = 2e-4  # Bench.heat_while's sleep between looks at the GPU (a round queued behind)
PROTOCOLS = ("device", "offline", "server", "graph")
SPOT_CHECK_TOLERANCE = 5e-3  # relative Frobenius error on N(0,1) inputs; cuBLAS is ~2e-4


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


@dataclass
class Runner:
    """Something that computes C = A·B for one problem: a candidate or a baseline.

    ``launch(ops, stream_handle)`` enqueues the work on the stream and returns a status (0 = ok).
    """

    name: str
    kind: str  # "candidate", "torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune"
    layout: Layout
    launch: Callable[[Operands, int], int]
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, ops: Operands, stream: torch.cuda.Stream) -> None:
        status = self.launch(ops, stream.cuda_stream)
        if status != 0:
            raise RunnerError(f"{self.name} returned status {status}")


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
    """Holds the operands, the stream and the L2 flush buffer for one problem."""

    def __init__(self, problem: Problem, *, seed: int, input_sets: int = 2) -> None:
        self.problem = problem
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(seed)
        self.rng = random.Random(seed)
        self.stream = torch.cuda.Stream()
        self.operand_sets = [Operands.random(problem, self.gen) for _ in range(input_sets)]
        self.flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        self.load: tuple[float, float] | None = None  # the last sustained load (monotonic s)
        torch.cuda.synchronize()

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
        started = time.monotonic()
        rep = 0
        check_every = min_reps
        with torch.cuda.stream(self.stream):
            while rep < max_reps:
                order = list(runners)
                self.rng.shuffle(order)
                ops = self.operand_sets[rep % len(self.operand_sets)]
                for runner in order:
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    self.flush_l2()
                    start.record(self.stream)
                    runner(ops, self.stream)
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
                        summarize(v).rel_se_median <= target_rel_se for v in samples.values()
                    )
                    if done or elapsed > max_seconds:
                        break
        torch.cuda.synchronize()
        self.loaded(started, time.monotonic())
        stats = {name: summarize(values) for name, values in samples.items()}
        return ProtocolResult("device", stats, {"reps": rep})

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
        samples: dict[str, list[float]] = {r.name: [] for r in runners}
        ops = self.operand_sets[0]
        started = time.monotonic()
        with torch.cuda.stream(self.stream):
            for _ in range(iterations):
                order = list(runners)
                self.rng.shuffle(order)
                for runner in order:
                    ops.refresh(self.gen)
                    torch.cuda.synchronize()
                    if qps:
                        time.sleep(self.rng.expovariate(qps))
                    t0 = time.perf_counter()
                    runner(ops, self.stream)
                    torch.cuda.synchronize()
                    samples[runner.name].append(time.perf_counter() - t0)
                if time.monotonic() - started > max_seconds:
                    break
        self.idled()
        stats = {name: summarize(values) for name, values in samples.items()}
        # CUDA-L2 reports the mean of per-iteration TFLOP/s
        mean_tflops = {
            name: sum(physics.tflops(self.problem, t) for t in values) / len(values)
            for name, values in samples.items()
        }
        protocol = "server" if qps else "offline"
        return ProtocolResult(protocol, stats, {"mean_tflops": mean_tflops, "qps": qps})

    def graph(
        self, runners: Sequence[Runner], *, calls_per_graph: int = 10, replays: int = 20
    ) -> ProtocolResult:
        """Per-call time from CUDA-graph replays (launch gaps removed, caches warm)."""
        stats: dict[str, TimingStats] = {}
        ops = self.operand_sets[0]
        for runner in runners:
            graph = torch.cuda.CUDAGraph()
            capture_stream = torch.cuda.Stream()
            with torch.cuda.graph(graph, stream=capture_stream):
                for _ in range(calls_per_graph):
                    runner(ops, capture_stream)
            graph.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(replays):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / calls_per_graph)
            stats[runner.name] = summarize(times)
            del graph
        self.idled()
        return ProtocolResult("graph", stats, {"calls_per_graph": calls_per_graph})

    def host_overhead(self, runners: Sequence[Runner], calls: int = 50) -> dict[str, float]:
        """Host seconds per call to enqueue work while the GPU is busy (launch-path overhead)."""
        overhead: dict[str, float] = {}
        ops = self.operand_sets[0]
        with torch.cuda.stream(self.stream):
            for runner in runners:
                torch.cuda._sleep(200_000_000)  # ~100 ms of GPU work ahead of the launches
                t0 = time.perf_counter()
                for _ in range(calls):
                    runner(ops, self.stream)
                overhead[runner.name] = (time.perf_counter() - t0) / calls
                torch.cuda.synchronize()
        self.idled()  # measured: a run right after this probe was 4-8 % faster
        return overhead

    def spot_check(self, runners: Sequence[Runner]) -> dict[str, float]:
        """Relative error of every runner on fresh inputs (inf for an error status).

        A runner over SPOT_CHECK_TOLERANCE behaved differently while timed: callers reject it.
        """
        errors: dict[str, float] = {}
        ops = self.operand_sets[0]
        for runner in runners:
            ops.refresh(self.gen)
            ops.c.fill_(float("nan"))
            torch.cuda.synchronize()
            with torch.cuda.stream(self.stream):
                status = runner.launch(ops, self.stream.cuda_stream)
            torch.cuda.synchronize()
            ref = ops.a.float() @ ops.b_nn.float()
            errors[runner.name] = (
                numerics.relative_frobenius_error(ops.c, ref) if status == 0 else float("inf")
            )
        self.idled()
        return errors
