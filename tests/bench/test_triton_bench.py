"""bench/triton_bench.py's logic without a GPU: which shapes, which configs, what is reported
(the GPU stage `bash bench/device/gpu_run.sh triton` runs the real one)."""

from __future__ import annotations

import json
import math

import pytest

from engine.codegen.triton import inductor_configs
from engine.problem import Problem
from tests.bench_scripts import load


@pytest.fixture(scope="module")
def bench():
    return load("triton_bench")


@pytest.fixture(scope="module")
def report(bench):
    return json.loads(bench.REPORT.read_text())


def test_the_default_shapes_are_the_latency_bound_ones_then_the_long_k_ones(bench, report):
    problems = bench.default_shapes(report)
    keys = [p.key for p in problems]
    assert keys[0] == "64x256x128_nn"  # the fastest for cuBLASLt-autotune
    assert len(keys) == len(set(keys))
    for key in keys:
        lt = report["shapes"].get(key, {}).get("protocols", {}).get("device", {})
        seconds = lt.get("baselines", {}).get(bench.BASELINE)
        assert seconds is None or seconds < bench.LATENCY_BOUND_S or key.endswith("_nn")
    assert "64x4096x16384_nn" in keys  # long K, small M·N, 45 µs


def test_the_sweep_adds_split_k_only_where_the_tiles_leave_the_gpu_idle(bench):
    long_k = bench.sweep_configs(Problem.parse("128x128x16384"), 10)
    assert any(c.splits > 1 for c in long_k)
    wide = bench.sweep_configs(Problem.parse("512x8192x512"), 10)
    assert all(c.splits == 1 for c in wide)
    inductor = {c.name for c in inductor_configs(Problem.parse("128x128x16384"))}
    assert not inductor & {c.name for c in long_k}


def test_our_best_kernels_are_rebuilt_from_the_campaign_records(bench, report):
    problems = [Problem.parse("64x256x128"), Problem.parse("128x128x16384", "tn")]
    best = bench.best_configs(bench.DB, report, problems)
    for problem in problems:
        recorded = report["shapes"][problem.key]["protocols"]["device"]["kernel"]
        assert best[problem.key].name == recorded


def test_a_shape_summary_separates_inductors_configs_from_the_sweep_and_ours(bench, report):
    problem = Problem.parse("64x256x128")
    inductor = inductor_configs(problem)[:2]
    sweep = bench.sweep_configs(problem, 1)
    ours = bench.best_configs(bench.DB, report, [problem])[problem.key]
    speedups = {inductor[0].name: 1.05, inductor[1].name: 0.9, sweep[0].name: 1.1, ours.name: 1.0}
    record = {
        "protocols": {
            "device": {
                "speedups": {n: {bench.BASELINE: s} for n, s in speedups.items()},
                "best_baselines": {bench.BASELINE: {"seconds": 5.5e-6}},
            }
        }
    }
    row = bench.summarize(problem, record, {"inductor": inductor, "sweep": sweep}, ours, report)
    assert row["inductor_best"] == inductor[0].name
    assert row["inductor_best_speedup"] == 1.05
    assert row["triton_best"] == sweep[0].name
    assert row["ours_speedup"] == 1.0
    means = bench.geomeans([row, {**row, "triton_best_speedup": 0.9, "ours_speedup": 1.2}])
    assert means["triton_best_speedup"] == pytest.approx(math.sqrt(1.1 * 0.9))
    assert means["best_of_ours_and_triton"] == pytest.approx(math.sqrt(1.1 * 1.2))
    assert "1.050x" in bench.format_row(row)


def test_fixed_nk_twins_are_read_against_their_run_time_twins(bench, report):
    problem = Problem.parse("256x2048x64")
    inductor = inductor_configs(problem)[:2]
    sets = {"inductor": inductor, "sweep": inductor[:1]}
    fixed = bench.fixed_nk_twins(problem, sets)
    assert [c.name for c in fixed] == [f"{c.name}_n2048k64" for c in inductor]
    assert all(c.is_valid(problem) for c in fixed)
    speedups = {inductor[0].name: 1.0, fixed[0].name: 1.06, fixed[1].name: 1.2}  # 2nd: no twin
    assert bench.fixed_nk_ratios(speedups, fixed) == {fixed[0].name: pytest.approx(1.06)}
    record = {
        "protocols": {
            "device": {
                "speedups": {n: {bench.BASELINE: s} for n, s in speedups.items()},
                "best_baselines": {bench.BASELINE: {"seconds": 5.5e-6}},
            }
        }
    }
    row = bench.summarize(problem, record, {**sets, "fixed": fixed}, None, report)
    assert row["fixed_nk_geomean"] == pytest.approx(1.06)
    assert row["triton_best"] == inductor[0].name  # the family's best keeps to run-time N and K
    assert "fixed N,K / run-time 1.060x" in bench.format_row(row)
