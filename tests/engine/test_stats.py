"""engine.stats: quantiles, summaries, the standard error of the median and the stopping
rule."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from engine.stats import (
    TimingStats,
    converged,
    quantile,
    relative_se_of_median_from,
    spread_between_runs,
    summarize,
)

QS = (0.0, 0.1, 0.25, 0.333, 0.5, 0.75, 0.9, 0.99, 1.0)


@pytest.mark.parametrize("size", [1, 2, 3, 10, 101, 1000])
def test_quantile_matches_numpys_default_method_on_random_samples(size):
    rng = random.Random(size)
    samples = sorted(rng.lognormvariate(-10, 0.5) for _ in range(size))
    for q in QS:
        assert quantile(samples, q) == pytest.approx(float(np.quantile(samples, q)), rel=1e-12)


def test_quantile_returns_the_extremes_at_zero_and_one():
    samples = [1.0, 2.0, 5.0]
    assert quantile(samples, 0.0) == 1.0
    assert quantile(samples, 1.0) == 5.0
    assert quantile(samples, 0.5) == 2.0
    assert quantile(samples, 0.75) == 3.5


def test_quantile_rejects_no_samples_and_out_of_range_q():
    with pytest.raises(ValueError, match="no samples"):
        quantile([], 0.5)
    for q in (-0.01, 1.01):
        with pytest.raises(ValueError, match="outside"):
            quantile([1.0], q)


def test_summarize_reports_the_order_statistics_whatever_the_input_order():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0]
    stats = summarize(samples)
    assert stats.n == 5
    assert stats.median == 3.0
    assert stats.mean == 3.0
    assert (stats.minimum, stats.maximum) == (1.0, 5.0)
    assert (stats.p25, stats.p75) == (2.0, 4.0)
    assert stats.p10 == pytest.approx(1.4)
    assert stats.p90 == pytest.approx(4.6)
    assert samples == [5.0, 1.0, 4.0, 2.0, 3.0]  # left alone


def test_summarize_of_one_sample_has_an_infinite_standard_error():
    stats = summarize([2e-6])
    assert stats.median == stats.mean == stats.minimum == stats.maximum == 2e-6
    assert stats.rel_se_median == math.inf
    assert stats.rel_iqr == 0.0


def test_summary_to_dict_includes_the_derived_values():
    data = summarize([1.0, 2.0, 3.0, 4.0]).to_dict()
    assert set(data) >= {"n", "median", "mean", "p10", "p90", "rel_iqr", "rel_se_median"}
    assert data["rel_iqr"] == pytest.approx((3.25 - 1.75) / 2.5)


def test_rel_se_median_uses_the_normal_iqr_and_the_median_efficiency():
    expected = 1.2533 * (0.2 / 1.349) / math.sqrt(100) / 1.0
    assert relative_se_of_median_from(0.9, 1.1, 1.0, 100) == pytest.approx(expected)


def test_rel_se_median_is_infinite_without_a_positive_median():
    assert relative_se_of_median_from(0.0, 0.0, 0.0, 100) == math.inf
    stats = TimingStats(10, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert stats.rel_iqr == math.inf
    assert stats.rel_se_median == math.inf


def test_rel_se_median_shrinks_with_more_samples():
    rng = random.Random(7)
    population = [rng.gauss(1e-4, 5e-6) for _ in range(6400)]
    errors = [summarize(population[:n]).rel_se_median for n in (25, 100, 400, 1600, 6400)]
    assert errors == sorted(errors, reverse=True)
    # about 1 / sqrt(n): 256 times the samples, 16 times smaller
    assert errors[0] / errors[-1] == pytest.approx(16, rel=0.3)


def test_converged_waits_for_the_minimum_number_of_samples():
    identical = [1e-5] * 9
    assert not converged(identical, min_samples=10, target_rel_se=1.0)
    assert converged([*identical, 1e-5], min_samples=10, target_rel_se=1e-9)


def test_converged_waits_until_the_median_is_known_to_the_target():
    rng = random.Random(3)
    samples = [rng.gauss(1e-4, 1e-5) for _ in range(2000)]
    se_at = {n: summarize(samples[:n]).rel_se_median for n in (20, 2000)}
    target = math.sqrt(se_at[20] * se_at[2000])  # between the two
    assert not converged(samples[:20], min_samples=5, target_rel_se=target)
    assert converged(samples, min_samples=5, target_rel_se=target)


def test_converged_is_exactly_the_rel_se_threshold():
    samples = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8]
    se = summarize(samples).rel_se_median
    assert converged(samples, min_samples=2, target_rel_se=se)
    assert not converged(samples, min_samples=2, target_rel_se=se * 0.999)


def test_spread_between_runs_is_the_range_over_the_median():
    assert spread_between_runs([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    assert spread_between_runs([2.0, 1.0]) == pytest.approx(1.0 / 1.5)


def test_spread_between_runs_of_one_run_is_zero():
    assert spread_between_runs([]) == 0.0
    assert spread_between_runs([3.0]) == 0.0
