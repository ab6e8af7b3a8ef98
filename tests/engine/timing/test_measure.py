"""engine.timing.measure.summarize_protocol (and the bench table built from it), from a fake
protocol result: best baselines, speedups, the statistic per protocol and the physical floor."""

from __future__ import annotations

import pytest

from engine.gpu.environment import GpuEnvironment
from engine.problem import Problem
from engine.timing.measure import summarize_protocol
from engine.timing.physics import PEAKS, floor_seconds
from engine.timing.tables import format_table

PROBLEM = Problem(4096, 4096, 4096)
FLOOR = floor_seconds(PROBLEM, PEAKS["H200"])


def environment(gpu_name: str = "NVIDIA H200") -> GpuEnvironment:
    return GpuEnvironment(
        gpu_name=gpu_name,
        arch="sm_90",
        sm_count=132,
        driver="570.00",
        cuda_runtime="12.8",
        cublaslt_version="120800",
        cutlass_version="3.9.0",
        torch_version="2.7.0",
        nvcc_version="12.8",
        hostname="test",
        python="3.12.0",
        recorded_at="2025-01-01T00:00:00+00:00",
    )


def stat(median: float, mean: float | None = None) -> dict[str, float]:
    mean = median if mean is None else mean
    return {"n": 100, "median": median, "mean": mean, "minimum": median * 0.9}


def protocol_result(protocol: str, stats: dict[str, dict[str, float]]) -> dict:
    return {"protocol": protocol, "stats": stats, "extra": "kept"}


BASELINE_STATS = {
    "torch_nn": stat(200e-6, 210e-6),
    "torch_tn": stat(190e-6, 230e-6),
    "cublas_nn": stat(180e-6, 185e-6),
    "cublas_tn": stat(170e-6, 200e-6),
    "cublaslt_autotune_nn": stat(160e-6, 190e-6),
    "cublaslt_autotune_tn": stat(165e-6, 175e-6),
}


def test_speedups_are_the_best_baseline_time_over_the_candidate_time():
    stats = {**BASELINE_STATS, "mine": stat(150e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert summary["speedups"]["mine"] == pytest.approx(
        {"torch": 190 / 150, "cublas": 170 / 150, "cublaslt_autotune": 160 / 150}
    )
    assert summary["best_baselines"]["cublas"] == {"seconds": 170e-6, "layout": "tn"}


def test_the_device_protocol_uses_medians():
    stats = {**BASELINE_STATS, "mine": stat(150e-6, 400e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert summary["statistic"] == "median"
    assert summary["seconds"]["mine"] == 150e-6
    assert summary["seconds"]["cublas_tn"] == 170e-6


@pytest.mark.parametrize("protocol", ["offline", "server"])
def test_the_offline_and_server_protocols_use_means(protocol):
    stats = {**BASELINE_STATS, "mine": stat(150e-6, 160e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result(protocol, stats), environment())
    assert summary["statistic"] == "mean"
    assert summary["seconds"]["mine"] == 160e-6
    # by mean, cublas is faster in nn (185 µs) than in tn (200 µs)
    assert summary["best_baselines"]["cublas"] == {"seconds": 185e-6, "layout": "nn"}
    assert summary["speedups"]["mine"]["cublas"] == pytest.approx(185 / 160)


def test_the_graph_protocol_uses_medians():
    summary = summarize_protocol(
        PROBLEM, protocol_result("graph", dict(BASELINE_STATS)), environment()
    )
    assert summary["statistic"] == "median"


def test_a_time_below_the_physical_floor_is_flagged_impossible():
    stats = {
        **BASELINE_STATS,
        "cheat": stat(FLOOR * 0.5),
        "honest": stat(FLOOR * 1.2),
    }
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert summary["floor_seconds"] == pytest.approx(139e-6, rel=0.01)
    assert summary["impossible"] == ["cheat"]


def test_an_impossible_baseline_is_flagged_too():
    stats = {**BASELINE_STATS, "torch_nn": stat(FLOOR * 0.1)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert summary["impossible"] == ["torch_nn"]


def test_the_floor_follows_the_gpu_name():
    stats = {**BASELINE_STATS, "mine": stat(120e-6)}
    on_h200 = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    on_unknown = summarize_protocol(
        PROBLEM, protocol_result("device", stats), environment("Future GPU")
    )
    assert on_h200["impossible"] == ["mine"]
    assert on_unknown["impossible"] == []
    assert on_unknown["floor_seconds"] < on_h200["floor_seconds"]


def test_tflops_are_reported_for_every_runner():
    stats = {**BASELINE_STATS, "mine": stat(150e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert set(summary["tflops"]) == set(stats)
    assert summary["tflops"]["mine"] == pytest.approx(PROBLEM.flops / 150e-6 / 1e12)


def test_baselines_get_no_speedups_and_the_input_is_kept():
    summary = summarize_protocol(
        PROBLEM, protocol_result("device", dict(BASELINE_STATS)), environment()
    )
    assert summary["speedups"] == {}
    assert summary["extra"] == "kept"
    assert summary["protocol"] == "device"


def test_several_candidates_each_get_speedups():
    stats = {**BASELINE_STATS, "a": stat(150e-6), "b": stat(300e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert set(summary["speedups"]) == {"a", "b"}
    assert summary["speedups"]["b"]["cublaslt_autotune"] == pytest.approx(160 / 300)


def test_a_candidate_whose_name_starts_like_a_baseline_still_gets_speedups():
    stats = {**BASELINE_STATS, "cublas_wrapped": stat(175e-6), "torchlike": stat(150e-6)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert set(summary["speedups"]) == {"cublas_wrapped", "torchlike"}


def test_a_zero_candidate_time_is_flagged_impossible_rather_than_crashing():
    stats = {**BASELINE_STATS, "mine": stat(0.0)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    assert summary["impossible"] == ["mine"]


def test_the_bench_table_shows_times_speedups_and_impossible_runners():
    stats = {**BASELINE_STATS, "mine": stat(150e-6), "cheat": stat(FLOOR * 0.5)}
    summary = summarize_protocol(PROBLEM, protocol_result("device", stats), environment())
    record = {
        "problem": {"m": 4096, "n": 4096, "k": 4096, "layout": "nn"},
        "environment": environment().to_dict(),
        "protocols": {"device": summary},
    }
    table = format_table(record)
    assert "4096x4096x4096 (nn)" in table
    assert "NVIDIA H200" in table
    assert "device protocol (median µs, TFLOP/s)" in table
    assert "150.00 µs" in table
    assert "speedup of mine:" in table
    assert f"cublas {170 / 150:.3f}x" in table
    assert "IMPOSSIBLE" in table
    assert "'cheat'" in table
    lines = [line.split()[0] for line in table.splitlines() if " µs " in line]
    assert lines[0] == "mine"  # fastest first of the runners that stand
    assert lines[-1] == "cheat"  # the impossible one last, marked


def test_the_environment_key_depends_on_what_baselines_depend_on():
    assert environment().key == environment().key
    assert environment("NVIDIA H100 PCIe").key != environment().key
    assert environment().to_dict()["key"] == environment().key
