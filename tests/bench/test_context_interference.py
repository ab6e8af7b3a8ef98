"""bench/context_interference.py without a GPU: how quiet and storm runs are compared, and that
a storm's creators start, create nothing without CUDA, and stop when told (its GPU run:
bench/device/gpu_run.sh interference)."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests import bench_scripts


@pytest.fixture(scope="module")
def ci() -> ModuleType:
    return bench_scripts.load("context_interference")


def run(storm: str | None, median: float, p90: float) -> dict:
    return {"storm": storm, "runners": {"cublaslt_autotune_nn": {"median": median, "p90": p90}}}


def test_each_storms_runs_are_compared_with_the_quiet_runs_by_their_medians(ci):
    runs = [
        run(None, 1.0, 1.1),
        run("context", 1.02, 1.3),
        run("fill", 2.0, 3.0),
        run(None, 1.2, 1.2),
        run("context", 1.5, 1.4),
        run("fill", 4.0, 5.0),
    ]
    ratios = ci.compare(runs, "context")["cublaslt_autotune_nn"]
    assert ratios["median_ratio"] == pytest.approx(1.26 / 1.1, abs=1e-4)
    assert ratios["p90_ratio"] == pytest.approx(1.35 / 1.15, abs=1e-4)
    assert ci.compare(runs, "fill")["cublaslt_autotune_nn"]["median_ratio"] == pytest.approx(
        3.0 / 1.1, abs=1e-4
    )


def test_a_protocol_result_becomes_each_runners_median_and_p90(ci):
    protocol = {"stats": {"torch_nn": {"median": 2e-4, "p90": 3e-4, "mean": 9.0, "n": 100}}}
    assert ci.run_summary(protocol) == {"torch_nn": {"median": 2e-4, "p90": 3e-4}}


@pytest.mark.slow
def test_a_storm_starts_its_creators_and_stops_them_when_told(ci):
    """Without CUDA every child fails to create its context, so none is counted."""
    storm = ci.Storm(creators=2, megabytes=1, kind="fill")
    assert all(proc.poll() is None for proc in storm.procs)
    assert storm.stop() == 0
    assert all(proc.returncode == 0 for proc in storm.procs)
