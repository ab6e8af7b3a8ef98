"""bench/baselines_run.py's plan (the GPU stage `bash bench/device/gpu_run.sh baselines` runs
it): which shapes, in which order, and the summary it prints."""

from __future__ import annotations

import json
import math

import pytest

from tests import bench_scripts


@pytest.fixture(scope="module")
def run():
    return bench_scripts.load("baselines_run")


def log2_mnk(shape: str) -> float:
    return math.log2(math.prod(int(x) for x in shape.split("x")))


def test_any_prefix_of_the_order_spans_the_sizes(run):
    items = [f"s{i}" for i in range(12)]
    order = run.spread_order(items)
    assert sorted(order) == sorted(items)
    assert order[:3] == ["s0", "s6", "s3"]
    first_four = {int(s[1:]) for s in order[:4]}
    assert min(first_four) == 0
    assert max(first_four) >= 9


def test_the_plan_alternates_harness_and_grid_shapes_without_repeats(run):
    harness = list(run.HARNESS_SHAPES)
    grid = run.grid_sample(16)
    assert len(grid) == 16
    planned = run.plan(harness, grid)
    shapes = [s for s, _ in planned]
    assert len(shapes) == len(set(shapes))
    assert set(harness) <= set(shapes)
    assert [origin for _, origin in planned[:4]] == ["harness", "grid", "harness", "grid"]


def test_the_grid_sample_covers_every_size_class(run):
    from engine.publish.report import size_class

    classes = [size_class(*(int(x) for x in s.split("x"))) for s in run.grid_sample(16)]
    assert {c: classes.count(c) for c in set(classes)} == {"small": 6, "medium": 5, "large": 5}


def row(shape, seconds):
    return {
        "problem": shape,
        "size_class": "small",
        "device_seconds": seconds,
        "vs_cublaslt_autotune": {b: seconds["cublaslt_autotune"] / t for b, t in seconds.items()},
        "predicted_seconds": 3e-6,
        "tuning": {
            "inductor_max_autotune_nn": {"tuning_seconds": 5.0, "runs": "triton", "pick": "t1"}
        },
    }


def test_the_geomeans_are_relative_to_cublaslt_autotune(run):
    rows = [
        row("64x64x64", {"cublaslt_autotune": 6e-6, "inductor_max_autotune": 5e-6}),
        row("128x64x64", {"cublaslt_autotune": 6e-6, "inductor_max_autotune": 7.5e-6}),
    ]
    g = run.geomeans(rows)
    assert g["all"]["cublaslt_autotune"] == 1.0
    assert g["small"]["inductor_max_autotune"] == pytest.approx(math.sqrt(1.2 * 0.8))
    assert "large" in g
    assert g["large"] == {}
    text = run.table(rows)
    assert "triton/t1 5s" in text
    assert "geomean vs cublaslt_autotune [all]" in text


def fake_record(problem, **_kwargs):
    seconds = {"cublaslt_autotune_nn": 6e-6, "inductor_max_autotune_tn": 5e-6, "tunableop_nn": 7e-6}
    best = {
        "cublaslt_autotune": {"seconds": 6e-6, "layout": "nn"},
        "inductor_max_autotune": {"seconds": 5e-6, "layout": "tn"},
        "tunableop": {"seconds": 7e-6, "layout": "nn"},
    }
    device = {
        "statistic": "median",
        "seconds": seconds,
        "tflops": dict.fromkeys(seconds, 1.0),
        "speedups": {},
        "impossible": [],
        "best_baselines": best,
        "power": {"samples": 3, "power_w": {"mean": 300.0}},
    }
    return {
        "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "layout": "nn"},
        "environment": {"gpu_name": "H200"},
        "autotune": {
            "inductor_max_autotune_tn": {"tuning_seconds": 3.0, "runs": "triton", "pick": {}},
        },
        "protocols": {"device": device},
    }


def test_the_run_writes_each_shape_and_the_table_within_its_deadline(run, monkeypatch, tmp_path):
    from engine.timing.floor_model import FloorModel

    measured = []

    def measure(problem, **kwargs):
        measured.append((problem.shape, kwargs["extra_baselines"], kwargs["protocols"]))
        return fake_record(problem)

    model = FloorModel(2e-6, 1e-6, 4e12, 800e12, "test")
    monkeypatch.setattr(run, "measure", measure)
    monkeypatch.setattr(run, "load_shim", lambda config: object())
    monkeypatch.setattr(run.floor_model, "calibrate", lambda: model)
    monkeypatch.setattr(run, "warm_inductor_pool", lambda: None)
    argv = ["baselines_run", "--out", str(tmp_path), "--shapes", "64x64x64,128x128x128"]
    monkeypatch.setattr("sys.argv", argv)
    assert run.main() == 0
    assert [m[0] for m in measured] == ["64x64x64", "128x128x128"]
    assert measured[0][1] == ("inductor_max_autotune", "tunableop")
    assert measured[0][2] == run.HARNESS_PROTOCOLS

    data = json.loads((tmp_path / "baselines.json").read_text())
    assert len(data["records"]) == 2
    assert data["records"][0]["prediction"]["bound"] == "latency"
    assert data["geomeans"]["all"]["inductor_max_autotune"] == pytest.approx(1.2)
    assert "triton/? 3s" in (tmp_path / "baselines-table.txt").read_text()


def test_no_shape_starts_past_the_deadline(run, monkeypatch, tmp_path):
    from engine.timing.floor_model import FloorModel

    monkeypatch.setattr(run, "measure", lambda problem, **_: pytest.fail("measured"))
    monkeypatch.setattr(run, "load_shim", lambda config: object())
    monkeypatch.setattr(run.floor_model, "calibrate", lambda: FloorModel(1, 1, 1, 1))
    monkeypatch.setattr(run, "warm_inductor_pool", lambda: None)
    argv = ["baselines_run", "--out", str(tmp_path), "--shapes", "64x64x64", "--deadline", "0"]
    monkeypatch.setattr("sys.argv", argv)
    assert run.main() == 0
    assert "not measured (deadline 0 s): 64x64x64" in (tmp_path / "baselines-table.txt").read_text()
