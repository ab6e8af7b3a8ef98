"""bench/timed_checks.py's comparison of baselines timed with and without the timed checks, on
made-up records."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load

timed_checks = load("timed_checks")


def record(medians: dict[str, list[float]], spreads: dict[str, float]) -> dict:
    device = {"repeat_medians": medians, "run_to_run_spread": spreads}
    return {"protocols": {"device": device}}


def test_a_baseline_that_moves_less_than_its_spread_is_within():
    with_checks = record({"cublas_nn": [101e-6, 102e-6, 100e-6]}, {"cublas_nn": 0.02})
    without = record({"cublas_nn": [100e-6, 100.5e-6, 99.5e-6]}, {"cublas_nn": 0.01})
    row = timed_checks.compare(with_checks, without)["cublas_nn"]
    assert row["move"] == pytest.approx(0.01)
    assert row["spread"] == 0.02
    assert row["within"] is True


def test_a_baseline_that_moves_beyond_both_spreads_is_reported():
    with_checks = record({"torch_tn": [110e-6, 111e-6, 109e-6]}, {"torch_tn": 0.02})
    without = record({"torch_tn": [100e-6, 101e-6, 99e-6]}, {"torch_tn": 0.02})
    assert timed_checks.compare(with_checks, without)["torch_tn"]["within"] is False


def test_the_honest_candidates_rejections_are_kept_per_protocol():
    summary = {
        "rejections": {"reference": {"reason": "precision"}, "other": {"reason": "wrong"}},
        "timed_checks": {"cost": {"per_runner_s": 0.01}, "baseline_failures": {}},
    }
    checks = timed_checks.protocol_checks({"protocols": {"device": summary}}, ["reference"])
    assert checks["device"]["rejections"] == {"reference": {"reason": "precision"}}
    assert checks["device"]["cost"] == {"per_runner_s": 0.01}


def test_each_run_keeps_its_mean_power_and_clock_or_none_without_nvml():
    measured = {
        "protocols": {
            "device": {"power": {"power_w": {"mean": 612.0}, "sm_clock_mhz": {"mean": 1755.0}}}
        }
    }
    assert timed_checks.power_and_clock(measured) == {"power_w": 612.0, "sm_clock_mhz": 1755.0}
    unread = {"protocols": {"device": {}}}
    assert timed_checks.power_and_clock(unread) == {"power_w": None, "sm_clock_mhz": None}
