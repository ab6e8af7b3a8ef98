"""The device protocol times the GPU's work alone, whatever the runner's host work costs: on a
bench without CUDA whose fake GPU runs its queue in order while the host clock advances (an
event is reached when the work queued before it ends; a sync waits for the queue)."""

from __future__ import annotations

import contextlib
import random

import pytest

from engine.problem import Layout, Problem
from engine.timing import protocols as bench_module
from engine.timing.protocols import Bench, Runner

FLUSH_S = 20e-6  # the L2 flush's GPU time
GPU_S = 10e-6  # every runner's kernel
CHEAP_HOST_S = 3e-6  # a launch through the C shim
HEAVY_HOST_S = 150e-6  # a compiled call's guards and wrapper: longer than the flush


class FakeGpu:
    """A host clock and one in-order GPU queue, as torch.cuda and time look to the protocol."""

    def __init__(self) -> None:
        self.now = 100.0
        self.free_at = self.now  # when the queued work ends
        self.sleeps: list[int] = []
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, _stream=None) -> None:
                self.at = max(gpu.now, gpu.free_at)
                gpu.free_at = self.at

            def elapsed_time(self, end) -> float:
                return (end.at - self.at) * 1e3

        self.Event = Event

    def enqueue(self, seconds: float) -> None:
        self.free_at = max(self.now, self.free_at) + seconds

    # torch.cuda
    def stream(self, _stream) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        self.now = max(self.now, self.free_at)

    def _sleep(self, cycles: int) -> None:
        self.sleeps.append(cycles)
        self.enqueue(cycles / 1.98e9)  # an H100's top SM clock

    # time
    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


class FakeStream:
    cuda_stream = 7

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def synchronize(self) -> None:
        self.gpu.synchronize()


class FlushBuffer:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def zero_(self) -> None:
        self.gpu.enqueue(FLUSH_S)


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    fake = FakeGpu()
    monkeypatch.setattr(bench_module.torch, "cuda", fake)
    monkeypatch.setattr(bench_module, "time", fake)
    return fake


def bench_on(gpu: FakeGpu) -> Bench:
    bench = Bench.__new__(Bench)
    bench.problem = Problem(64, 64, 64, Layout.NN)
    bench.rng = random.Random(3)
    bench.stream = FakeStream(gpu)
    bench.timed_checks = False
    bench.operand_sets = [object(), object()]
    bench.l2_flush = "write"
    bench.flush_buffer = FlushBuffer(gpu)
    bench.load = None
    return bench


def runner(gpu: FakeGpu, name: str, host_s: float) -> Runner:
    def launch(_ops, _stream) -> int:
        gpu.now += host_s
        gpu.enqueue(GPU_S)
        return 0

    return Runner(name, "cublaslt_autotune", Layout.NN, launch)


def test_a_runner_whose_host_work_outlasts_the_flush_is_timed_by_its_gpu_work_alone(gpu):
    bench = bench_on(gpu)
    cheap, heavy = runner(gpu, "shim", CHEAP_HOST_S), runner(gpu, "compiled", HEAVY_HOST_S)
    result = bench.device([cheap, heavy], min_reps=40, max_reps=40, min_seconds=0.0)
    assert result.stats["shim"].median == pytest.approx(GPU_S)
    assert result.stats["compiled"].median == pytest.approx(GPU_S)
    assert result.stats["compiled"].maximum == pytest.approx(GPU_S)  # not even the first call


def test_without_the_hold_the_heavy_runners_host_work_would_be_timed(gpu, monkeypatch):
    """What the hold removes: the GPU idle inside the interval, host work minus the flush."""
    monkeypatch.setattr(Bench, "hold_for_host_work", staticmethod(lambda _recent: None))
    bench = bench_on(gpu)
    heavy = runner(gpu, "compiled", HEAVY_HOST_S)
    result = bench.device([heavy], min_reps=20, max_reps=20, min_seconds=0.0)
    # the GPU idles from the flush's end until the host has enqueued the kernel: 130 µs of 10
    assert result.stats["compiled"].median > 10 * GPU_S


def test_the_hold_follows_each_runners_recent_host_time(gpu):
    Bench.hold_for_host_work([])
    Bench.hold_for_host_work([10e-6, 12e-6, 500e-6])  # one slow call (a GC pause) moves nothing
    first, recent = gpu.sleeps
    assert first / bench_module.SLEEP_CYCLES_PER_S == pytest.approx(bench_module.HOST_WORK_FIRST_S)
    held = recent / bench_module.SLEEP_CYCLES_PER_S
    assert held == pytest.approx(2 * 12e-6 + bench_module.HOST_WORK_MARGIN_S, rel=1e-3)
