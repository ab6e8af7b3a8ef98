"""engine.timing.floor_model: launch + DRAM latency + max(bytes / bandwidth, FLOPs / rate),
predicted before timing and printed beside what was measured."""

from __future__ import annotations

import json

import pytest

from engine.problem import Layout, Problem
from engine.timing import floor_model
from engine.timing.floor_model import FloorModel, predict

# round numbers to check the arithmetic; the real terms come from calibrate() on the card
MODEL = FloorModel(
    launch_s=2e-6,
    dram_latency_s=1e-6,
    bandwidth_bytes_per_s=4e12,
    tensor_flops_per_s=800e12,
    source="test",
)


def test_a_tiny_problem_is_latency_bound():
    p = predict(Problem(64, 64, 64, Layout.NN), MODEL)
    assert p.bound == "latency"
    memory = 2 * (3 * 64 * 64) / 4e12
    assert p.seconds == pytest.approx(3e-6 + memory)


def test_a_big_square_problem_is_compute_bound():
    problem = Problem(8192, 8192, 8192, Layout.NN)
    p = predict(problem, MODEL)
    assert p.bound == "compute"
    assert p.seconds == pytest.approx(3e-6 + problem.flops / 800e12)


def test_a_short_k_wide_problem_is_memory_bound():
    problem = Problem(16384, 16384, 64, Layout.NN)
    p = predict(problem, MODEL)
    assert p.bound == "memory"
    assert p.terms["memory"] == pytest.approx(problem.operand_bytes / 4e12)


def record(shape, seconds_by_baseline):
    m, n, k = (int(x) for x in shape.split("x"))
    return {
        "problem": {"m": m, "n": n, "k": k, "layout": "nn"},
        "protocols": {
            "device": {
                "best_baselines": {
                    b: {"seconds": s, "layout": "nn"} for b, s in seconds_by_baseline.items()
                }
            }
        },
        "prediction": {"model": MODEL.to_dict()},
    }


def test_measured_is_compared_with_the_fastest_baseline():
    records = [record("64x64x64", {"cublaslt_autotune": 6e-6, "inductor_max_autotune": 5.5e-6})]
    [row] = floor_model.compare(floor_model.records_rows(records), MODEL)
    assert row["measured_s"] == 5.5e-6
    assert row["measured_over_predicted"] == pytest.approx(5.5e-6 / row["predicted_s"])
    assert row["bound"] == "latency"


def test_the_floor_command_prints_prediction_beside_measurement(tmp_path, capsys):
    from engine.cli import main

    path = tmp_path / "bench.json"
    path.write_text(json.dumps([record("64x64x64", {"torch": 7e-6}), {"problem": {}}]))
    assert main(["floor", str(path)]) == 0
    out = capsys.readouterr().out
    assert "launch 2.00 µs, DRAM latency 1.00 µs, 4.00 TB/s, 800 TFLOP/s" in out
    assert "64x64x64_nn" in out
    assert "latency" in out


def test_the_floor_command_says_when_the_file_has_no_model(tmp_path):
    from engine.cli import main

    path = tmp_path / "bench.json"
    path.write_text("[]")
    with pytest.raises(SystemExit, match="no floor model"):
        main(["floor", str(path)])


def test_engine_bench_prints_the_prediction_beside_the_fastest_baseline():
    from engine.timing.tables import prediction_line

    rec = record("64x64x64", {"torch": 9e-6, "tunableop": 6e-6})
    rec["prediction"].update({"seconds": 4e-6, "bound": "latency"})
    line = prediction_line(rec)
    assert line == (
        "  floor model: 4.00 µs (latency-bound); fastest baseline tunableop 6.00 µs = 1.50x"
    )


def test_the_tensor_rate_is_the_fastest_shapes_not_the_power_limited_one():
    # the H100 of 2026-12-06: 8192³ at about 750 TFLOP/s, 2048×4096×16384 in 353.8 µs (777)
    seconds = {(8192, 8192, 8192): 2 * 8192**3 / 750e12, (2048, 4096, 16384): 353.8e-6}
    assert floor_model.fastest_rate(seconds) == pytest.approx(2 * 2048 * 4096 * 16384 / 353.8e-6)


@pytest.mark.gpu
def test_calibration_measures_every_term_on_the_gpu():
    model = floor_model.calibrate(reps=10)
    assert 0 < model.launch_s < 20e-6
    assert model.dram_latency_s >= 0
    assert 0.3e12 < model.bandwidth_bytes_per_s < 20e12
    assert 10e12 < model.tensor_flops_per_s < 3000e12
