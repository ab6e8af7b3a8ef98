"""engine.gpu.power: NVML power and SM clock sampled while kernels run (fakes for NVML here; the GPU
test reads the real card)."""

from __future__ import annotations

import types

import pytest

from engine.gpu import power


class FakeReader:
    source = "instant"

    def __init__(self, readings):
        self.readings = list(readings)
        self.reads = 0

    def read(self):
        self.reads += 1
        return self.readings[min(self.reads - 1, len(self.readings) - 1)]


def test_the_summary_gives_mean_min_max_and_how_often_the_power_cap_held_the_clock():
    samples = [
        (0.0, 690.0, 1500.0, 0x4),
        (0.1, 700.0, 1410.0, 0x4),
        (0.2, 650.0, 1755.0, 0x0),
        (0.3, None, 1980.0, None),
    ]
    s = power.summarize(samples, "instant")
    assert s["samples"] == 4
    assert s["power_w"] == {"mean": pytest.approx(680.0), "min": 650.0, "max": 700.0}
    assert s["sm_clock_mhz"]["min"] == 1410.0
    assert s["sm_clock_mhz"]["max"] == 1980.0
    assert s["power_capped_fraction"] == pytest.approx(2 / 3)
    assert s["power_source"] == "instant"


def test_nothing_read_leaves_only_the_count():
    assert power.summarize([(0.0, None, None, None)], "average") == {
        "samples": 1,
        "power_source": "average",
    }


def test_the_sampler_reads_on_its_thread_until_the_block_ends():
    reader = FakeReader([(500.0, 1900.0, 0)])
    with power.Sampler(reader, interval=0.001) as sampler:
        while reader.reads < 5:
            pass
    count = reader.reads
    assert len(sampler.samples) == count
    assert sampler.summary()["power_w"]["mean"] == 500.0
    assert reader.reads == count  # stopped


def test_each_runner_gets_its_own_window():
    readings = {"a": (300.0, 1980.0, 0), "b": (700.0, 1400.0, 0x4)}
    current = {"name": "a"}

    class Reader:
        source = "instant"

        def read(self):
            return readings[current["name"]]

    runners = [types.SimpleNamespace(name="a"), types.SimpleNamespace(name="b")]
    calls = []

    def call(runner):
        current["name"] = runner.name
        calls.append(runner.name)

    out = power.per_runner(runners, call, lambda: None, Reader(), seconds=0.03)
    assert set(out) == {"a", "b"}
    assert out["b"]["power_w"]["mean"] == 700.0
    assert out["b"]["power_capped_fraction"] == 1.0
    assert out["a"]["sm_clock_mhz"]["mean"] == 1980.0
    assert calls.index("b") > calls.index("a")


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_FI_DEV_POWER_INSTANT = 186

    def __init__(self, instant_ok=True):
        self.instant_ok = instant_ok

    def nvmlDeviceGetFieldValues(self, handle, fids):
        value = types.SimpleNamespace(
            nvmlReturn=0 if self.instant_ok else 3, value=types.SimpleNamespace(uiVal=612_000)
        )
        return [value]

    def nvmlDeviceGetPowerUsage(self, handle):
        return 598_000

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return 1755

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4


def test_the_reader_prefers_instant_power_and_falls_back_to_the_average():
    instant = power.NvmlReader(FakeNvml(), handle=0)
    assert instant.source == "instant"
    assert instant.read() == (612.0, 1755.0, 0x4)
    average = power.NvmlReader(FakeNvml(instant_ok=False), handle=0)
    assert average.source == "average"
    assert average.read() == (598.0, 1755.0, 0x4)


def test_engine_bench_shows_each_runners_power_and_clock():
    from engine.timing.tables import power_label

    label = power_label(
        {"power_w": {"mean": 612.4}, "sm_clock_mhz": {"mean": 1755.0}, "power_capped_fraction": 0.5}
    )
    assert label == "    612 W  1755 MHz capped 50%"
    assert power_label(None) == ""
    assert power_label({"samples": 0}) == ""


@pytest.mark.gpu
def test_nvml_reads_the_gpu_torch_uses():
    reader = power.open_reader()
    if reader is None:
        pytest.skip("no pynvml or NVML on this machine")
    watts, mhz, _reasons = reader.read()
    assert watts is not None
    assert 10 < watts < 2000
    assert mhz is not None
    assert 100 < mhz < 4000


@pytest.mark.gpu
def test_each_baseline_alone_gets_power_and_clock_readings_on_the_gpu():
    from engine.problem import Layout, Problem
    from engine.timing.baselines import torch_runner
    from engine.timing.measure import runner_power
    from engine.timing.protocols import Bench

    reader = power.open_reader()
    if reader is None:
        pytest.skip("no pynvml or NVML on this machine")
    problem = Problem(2048, 2048, 2048, Layout.NN)
    bench = Bench(problem, seed=3)
    runners = [torch_runner(problem, Layout.NN), torch_runner(problem, Layout.TN)]
    out = runner_power(bench, runners, reader, 0.2)
    assert set(out) == {"torch_nn", "torch_tn"}
    for summary in out.values():
        assert summary["samples"] > 5
        assert summary["sm_clock_mhz"]["mean"] > 100
