"""Bench.heat_up: the GPU is to have been under sustained load for ``seconds`` before
timing; load the bench has just put on it (an autotuning's timing) counts, so a heat-up right
after one runs only the rest, and any pause, probe or sync-per-call protocol starts it afresh.
A bench without CUDA stands in (its stream does nothing)."""

from __future__ import annotations

import contextlib
import time

import pytest

from engine.timing import protocols as bench_module
from engine.timing.protocols import LOAD_GAP_S, Bench


class Stream:
    cuda_stream = 0

    def synchronize(self) -> None:
        pass


@pytest.fixture
def bench(monkeypatch) -> Bench:
    monkeypatch.setattr(bench_module.torch.cuda, "stream", lambda _s: contextlib.nullcontext())
    b = Bench.__new__(Bench)
    b.stream = Stream()
    b.operand_sets = [None]
    b.load = None
    return b


class Counting:
    name = "r"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ops, stream) -> None:
        self.calls += 1
        time.sleep(0.001)


def test_only_a_recent_stretch_of_load_counts():
    b = Bench.__new__(Bench)
    b.load = None
    assert b.sustained_load_s(100.0) == 0.0
    b.loaded(90.0, 95.0)
    b.loaded(95.0 + LOAD_GAP_S / 2, 99.0)  # a short gap: one stretch
    assert b.sustained_load_s(99.0) == pytest.approx(9.0)
    assert b.sustained_load_s(99.0 + 2 * LOAD_GAP_S) == 0.0  # paused since
    b.loaded(120.0, 121.0)  # after a long gap: a new stretch
    assert b.sustained_load_s(121.0) == pytest.approx(1.0)
    b.idled()
    assert b.sustained_load_s(121.0) == 0.0


def test_a_heat_up_right_after_an_autotuning_runs_only_the_rest(bench):
    now = time.monotonic()
    bench.loaded(now - 5.0, now)  # an autotuning's timing just ended
    runner = Counting()
    assert bench.heat_up([runner], 1.0) == 0.0
    assert runner.calls == 0
    bench.idled()
    bench.loaded(time.monotonic() - 0.03, time.monotonic())  # 30 ms of load only
    ran = bench.heat_up([runner], 0.1)
    assert 0.06 <= ran < 0.5  # the 70 ms left
    assert runner.calls > 0


def test_a_cold_gpu_gets_the_whole_heat_up(bench):
    runner = Counting()
    assert bench.heat_up([runner], 0.05) >= 0.05
    assert runner.calls > 0
    assert bench.sustained_load_s() >= 0.05  # the timing that follows starts hot


def test_the_host_overhead_probe_and_spot_checks_end_a_stretch(bench):
    now = time.monotonic()
    bench.loaded(now - 5.0, now)
    bench.idled()  # what host_overhead, offline, graph and spot_check end with
    runner = Counting()
    assert bench.heat_up([runner], 0.05) >= 0.05
