"""The offline protocol's timed interval and the host-overhead probe, on a bench without CUDA:
a fake clock, fake events and syncs, operand sets that only log, and runners whose host work
depends on the buffers the way the sm90 launcher's does (it initialises its operator again
when A, B or C change)."""

from __future__ import annotations

import contextlib
import itertools
import random
from dataclasses import dataclass, field

import pytest

from engine.problem import Layout, Problem
from engine.timing import protocols as bench_module
from engine.timing.protocols import Bench, Runner

CANDIDATE = "candidate"
REINIT_S = 10e-6  # the candidate's host work when its buffers changed since its last call
LAUNCH_S = 3e-6  # a launch's host work otherwise, every runner
GPU_S = 50e-6  # every runner's GPU time


@dataclass
class Trace:
    """What happened, in order, and a clock that only the fakes advance."""

    now: float = 100.0
    steps: list[tuple[str, str]] = field(default_factory=list)

    def log(self, step: str, detail: str = "") -> None:
        self.steps.append((step, detail))


class FakeTime:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def perf_counter(self) -> float:
        self.trace.log("clock")
        return self.trace.now

    def monotonic(self) -> float:
        return self.trace.now

    def sleep(self, seconds: float) -> None:
        self.trace.now += seconds


class FakeCuda:
    """torch.cuda as the protocols use it: a sync waits for the GPU's queued work."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.queued = 0.0
        test = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, _stream=None) -> None:
                test.trace.log("event")
                self.at = test.trace.now + test.queued

            def elapsed_time(self, end) -> float:
                return (end.at - self.at) * 1e3

        self.Event = Event

    def stream(self, _stream) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        self.trace.log("sync")
        self.trace.now += self.queued
        self.queued = 0.0

    def _sleep(self, _cycles: int) -> None:
        self.queued += 0.1


class Stream:
    cuda_stream = 7

    def synchronize(self) -> None:
        pass


class LoggedOperands:
    def __init__(self, index: int, trace: Trace) -> None:
        self.index = index
        self.trace = trace

    def prepare(self, layout: Layout, _gen) -> None:
        self.trace.log("prepare", f"set{self.index}")

    def refresh(self, _gen) -> None:
        self.trace.log("refresh", f"set{self.index}")


def launcher(name: str, trace: Trace, cuda: FakeCuda, *, caches_buffers: bool):
    """A runner's launch: LAUNCH_S of host work, REINIT_S more when it keys a cache on its
    buffers and they changed (the sm90 launcher), then GPU_S queued on the stream."""
    last: list[int] = []

    def launch(ops: LoggedOperands, stream: int) -> int:
        assert stream == Stream.cuda_stream
        trace.log("call", name)
        changed = last != [ops.index]
        last[:] = [ops.index]
        trace.now += LAUNCH_S + (REINIT_S if caches_buffers and changed else 0.0)
        cuda.queued += GPU_S
        return 0

    return launch


@pytest.fixture
def trace() -> Trace:
    return Trace()


@pytest.fixture
def cuda(trace: Trace, monkeypatch) -> FakeCuda:
    fake = FakeCuda(trace)
    monkeypatch.setattr(bench_module.torch, "cuda", fake)
    monkeypatch.setattr(bench_module, "time", FakeTime(trace))
    return fake


def new_bench(trace: Trace, *, sets: int = 4, checks: bool = True) -> Bench:
    bench = Bench.__new__(Bench)
    bench.problem = Problem(64, 64, 64, Layout.NN)
    bench.gen = None
    bench.rng = random.Random(5)
    bench.stream = Stream()
    bench.timed_checks = checks
    bench.operand_sets = [LoggedOperands(i, trace) for i in range(sets)]
    bench.load = None
    bench.calls = 0
    bench.prepare_s_per_call = 0.0
    bench.tolerance = 0.0

    def sampled(runner: Runner, kind: str, rep: int, log) -> None:
        trace.log("sampled", runner.name)

    bench.sampled = sampled
    return bench


def runners(trace: Trace, cuda: FakeCuda) -> list[Runner]:
    """The candidate (its launcher keys a cache on its buffers) and cuBLASLt in both layouts."""

    def runner(name: str, kind: str, layout: Layout) -> Runner:
        launch = launcher(name, trace, cuda, caches_buffers=kind == "candidate")
        return Runner(name, kind, layout, launch)

    return [
        runner(CANDIDATE, "candidate", Layout.NN),
        runner("cublaslt_autotune_nn", "cublaslt_autotune", Layout.NN),
        runner("cublaslt_autotune_tn", "cublaslt_autotune", Layout.TN),
    ]


def timed_windows(steps: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Per call, what happened from the last sync before it to the first clock after the next
    sync (the host-timed interval and its edges), the runner's name replaced by RUNNER."""
    windows = []
    for i, (step, name) in enumerate(steps):
        if step != "call":
            continue
        begin = max(j for j in range(i) if steps[j][0] == "sync")
        after = min(j for j in range(i, len(steps)) if steps[j][0] == "sync")
        end = min(j for j in range(after, len(steps)) if steps[j][0] == "clock")
        window = [s if d != name else f"{s} RUNNER" for s, d in steps[begin + 1 : end + 1]]
        windows.append((name, window))
    return windows


@pytest.mark.parametrize("checks", [True, False])
def test_every_runner_carries_the_same_work_inside_the_offline_timed_interval(trace, cuda, checks):
    bench = new_bench(trace, checks=checks)
    bench.offline(runners(trace, cuda), iterations=20)
    windows = timed_windows(trace.steps)
    assert {name for name, _ in windows} == {r.name for r in runners(trace, cuda)}
    shapes = {tuple(window) for _, window in windows}
    assert shapes == {("event", "clock", "call RUNNER", "clock", "event", "sync", "clock")}


def test_each_timed_call_is_prepared_before_the_interval_on_a_set_the_last_call_did_not_use(
    trace, cuda
):
    bench = new_bench(trace, sets=3)
    bench.offline(runners(trace, cuda), iterations=20)
    steps = trace.steps
    calls = [i for i, (step, _) in enumerate(steps) if step == "call"]
    used = []
    for i in calls:
        prepare = max(j for j in range(i) if steps[j][0] == "prepare")
        between = [s for s, _ in steps[prepare + 1 : i]]
        assert between == ["sync", "event", "clock"]  # prepared, the device idle, then timed
        used.append(steps[prepare][1])
    assert all(a != b for a, b in itertools.pairwise(used))


def test_offline_records_where_each_runners_time_goes(trace, cuda):
    bench = new_bench(trace, sets=4)
    result = bench.offline(runners(trace, cuda), iterations=30)
    launch = result.extra["launch_host_s"]
    # four sets in turn among three runners: the candidate's buffers change on most of its calls
    assert launch[CANDIDATE] == pytest.approx(LAUNCH_S + REINIT_S)
    assert launch["cublaslt_autotune_nn"] == pytest.approx(LAUNCH_S)
    for name, stats in result.stats.items():
        assert stats.median == pytest.approx(launch[name] + GPU_S)
        # the start event is recorded on the idle stream: the event time holds the launch
        assert result.extra["event_s"][name] == pytest.approx(launch[name] + GPU_S)
        assert stats.minimum <= result.extra["event_mean_s"][name] <= stats.maximum


def test_without_the_checks_one_operand_set_lets_a_buffer_cache_hit_every_call(trace, cuda):
    bench = new_bench(trace, sets=2, checks=False)
    result = bench.offline(runners(trace, cuda), iterations=30)
    assert result.stats[CANDIDATE].median == pytest.approx(LAUNCH_S + GPU_S)
    assert result.stats[CANDIDATE].maximum == pytest.approx(LAUNCH_S + REINIT_S + GPU_S)


def test_the_host_overhead_probe_rotates_the_buffers_as_the_timed_calls_do(trace, cuda):
    bench = new_bench(trace, sets=3)
    overhead = bench.host_overhead(runners(trace, cuda), calls=10)
    assert overhead["rotating"][CANDIDATE] == pytest.approx(LAUNCH_S + REINIT_S)
    assert overhead["same_buffers"][CANDIDATE] == pytest.approx(LAUNCH_S)
    for name in ("cublaslt_autotune_nn", "cublaslt_autotune_tn"):
        assert overhead["rotating"][name] == pytest.approx(LAUNCH_S)
        assert overhead["same_buffers"][name] == pytest.approx(LAUNCH_S)


def test_the_server_protocol_idles_before_the_start_event(trace, cuda):
    bench = new_bench(trace)
    result = bench.offline(runners(trace, cuda), iterations=10, qps=1000.0)
    assert result.protocol == "server"
    for name, stats in result.stats.items():
        assert stats.maximum < 1e-3  # the idle gap is never inside the timed interval
        assert result.extra["event_s"][name] == pytest.approx(stats.median)


@pytest.mark.gpu
def test_on_the_gpu_the_offline_time_splits_into_the_launch_and_the_event_time():
    from engine.timing.baselines import torch_runner

    problem = Problem(512, 512, 512, Layout.NN)
    bench = Bench(problem, seed=3)
    on_gpu = [torch_runner(problem, Layout.NN), torch_runner(problem, Layout.TN)]
    result = bench.offline(on_gpu, iterations=40)
    for name, wall in result.stats.items():
        assert 0 < result.extra["launch_host_s"][name] < wall.median
        # the start event is taken on the idle stream just before t0; the wall adds the sync
        assert 0 < result.extra["event_s"][name] < wall.median + 5e-6
    overhead = bench.host_overhead(on_gpu, calls=10)
    assert set(overhead["rotating"]) == set(overhead["same_buffers"]) == {r.name for r in on_gpu}
    assert all(0 < s < 1e-3 for s in overhead["rotating"].values())
