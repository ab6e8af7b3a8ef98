"""engine.verify.numerics on the CPU: fp16 ulps, the checks' NaN handling, and that the precision
checks accept fp32 accumulation but reject fp16 accumulation (docs/verification.md row 10)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.verify.numerics import (
    MAX_ULP,
    TOLERANCE_FACTOR,
    TOLERANCE_FLOOR,
    calibrated_tolerance,
    exact_mismatches,
    fp16_ulp,
    nonfinite_count,
    relative_frobenius_error,
    simulate_fp16_accumulation,
    ulp_errors,
    ulp_report,
)

INF16 = torch.tensor(float("inf"), dtype=torch.float16)


def spacing_above(values: torch.Tensor) -> torch.Tensor:
    """Distance from each (non-negative, finite) fp16 value to the next fp16 value above it."""
    halves = values.half()
    upper = torch.nextafter(halves, INF16.expand_as(halves))
    return upper.float() - halves.float()


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fp32_accumulated(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).half()


def exact(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double() @ b.double()


def test_fp16_ulp_matches_the_spacing_of_fp16_values_at_random_magnitudes():
    exponents = torch.empty(20000).uniform_(-24, 15.9, generator=generator(1))
    values = torch.exp2(exponents).half()
    values = values[values.isfinite() & (values < 65504)]
    assert torch.equal(fp16_ulp(values), spacing_above(values))


def test_fp16_ulp_matches_the_spacing_at_every_power_of_two():
    powers = torch.exp2(torch.arange(-24, 16, dtype=torch.float32)).half()
    assert torch.equal(fp16_ulp(powers), spacing_above(powers))
    assert fp16_ulp(torch.tensor([1.0])).item() == 2.0**-10
    assert fp16_ulp(torch.tensor([1024.0])).item() == 1.0


def test_fp16_ulp_matches_the_spacing_just_below_powers_of_two():
    powers = torch.exp2(torch.arange(-13, 16, dtype=torch.float32)).half()
    below = torch.nextafter(powers, torch.zeros_like(powers))
    assert torch.equal(fp16_ulp(below), spacing_above(below))


def test_fp16_ulp_is_the_smallest_subnormal_step_at_zero_and_below_the_normals():
    values = torch.tensor([0.0, 2.0**-24, 3 * 2.0**-20, 2.0**-14 - 2.0**-24])
    assert torch.equal(fp16_ulp(values), torch.full((4,), 2.0**-24))


def test_fp16_ulp_is_the_same_for_negative_values():
    values = torch.exp2(torch.empty(1000).uniform_(-20, 15, generator=generator(2))).half()
    assert torch.equal(fp16_ulp(-values), fp16_ulp(values))


def test_fp16_ulp_of_the_largest_fp16_value_is_32():
    assert fp16_ulp(torch.tensor([65504.0])).item() == 32.0


def test_fp16_ulp_returns_float32():
    assert fp16_ulp(torch.ones(3, dtype=torch.float16)).dtype == torch.float32


def test_ulp_errors_are_infinite_where_the_output_is_not_finite():
    out = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float16)
    ref = torch.ones(3, dtype=torch.float64)
    errors = ulp_errors(out, ref)
    assert errors[0] == 0.0
    assert math.isinf(errors[1])
    assert math.isinf(errors[2])
    report = ulp_report(out, ref)
    assert not report.ok
    assert report.fraction_over == pytest.approx(2 / 3)


def test_ulp_report_counts_one_ulp_as_ok_and_more_as_not():
    ref = torch.tensor([1.0, 1.0], dtype=torch.float64)
    one_ulp = torch.tensor([1.0, 1.0 + 2.0**-10], dtype=torch.float16)
    two_ulp = torch.tensor([1.0, 1.0 + 2.0**-9], dtype=torch.float16)
    assert ulp_report(one_ulp, ref).ok
    assert ulp_report(one_ulp, ref).max_ulp == MAX_ULP
    assert not ulp_report(two_ulp, ref).ok
    assert ulp_report(two_ulp, ref).fraction_over == 0.5


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_an_fp32_accumulated_result_passes_the_ulp_check_on_uniform_inputs(k):
    a = torch.rand(16, k, generator=generator(k)).half()
    b = torch.rand(k, 16, generator=generator(k + 1)).half()
    report = ulp_report(fp32_accumulated(a, b), exact(a, b))
    assert report.ok, report
    assert report.max_ulp <= 0.5 + 0.01  # one rounding to fp16, plus fp32 rounding


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_it_rejects_fp16_accumulation_on_uniform_inputs(k):
    a = torch.rand(16, k, generator=generator(k)).half()
    b = torch.rand(k, 16, generator=generator(k + 1)).half()
    report = ulp_report(simulate_fp16_accumulation(a, b), exact(a, b))
    assert not report.ok
    assert report.max_ulp > MAX_ULP


def test_simulated_fp16_accumulation_matches_the_product_on_a_single_chunk():
    a = torch.rand(8, 16, generator=generator(5)).half()
    b = torch.rand(16, 8, generator=generator(6)).half()
    assert torch.equal(simulate_fp16_accumulation(a, b), fp32_accumulated(a, b))


def test_exact_mismatches_counts_elements_that_differ_from_one_rounding():
    a = torch.rand(8, 32, generator=generator(3))
    ref = exact(a, torch.rand(32, 8, generator=generator(4)))
    out = ref.half().clone()
    assert exact_mismatches(out, ref) == 0
    out[0, 0] = torch.nextafter(out[0, 0], INF16)
    assert exact_mismatches(out, ref) == 1


def test_exact_mismatches_counts_nan_as_a_mismatch():
    ref = torch.ones(2, 2, dtype=torch.float64)
    out = ref.half()
    out[1, 1] = float("nan")
    assert exact_mismatches(out, ref) == 1
    assert exact_mismatches(torch.full((2, 2), float("nan"), dtype=torch.float16), ref) == 4


def test_nonfinite_count_counts_nan_and_both_infinities():
    out = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")], dtype=torch.float16)
    assert nonfinite_count(out) == 3


def test_relative_frobenius_error_is_inf_for_nan_or_inf_outputs():
    ref = torch.ones(4, 4, dtype=torch.float64)
    for bad in (float("nan"), float("inf")):
        out = ref.half()
        out[2, 3] = bad
        assert relative_frobenius_error(out, ref) == math.inf


def test_relative_frobenius_error_is_the_norm_ratio():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    out = torch.tensor([3.0, 4.5], dtype=torch.float16)
    assert relative_frobenius_error(out, ref) == pytest.approx(0.5 / 5.0)
    assert relative_frobenius_error(ref.half(), ref) == 0.0


def test_relative_frobenius_error_of_a_zero_reference_does_not_divide_by_zero():
    zero = torch.zeros(3, dtype=torch.float64)
    assert relative_frobenius_error(zero.half(), zero) == 0.0
    assert relative_frobenius_error(torch.ones(3, dtype=torch.float16), zero) > 1e20


def test_calibrated_tolerance_is_a_multiple_of_the_library_error_with_a_floor():
    assert calibrated_tolerance(2.1e-4) == pytest.approx(TOLERANCE_FACTOR * 2.1e-4)
    assert calibrated_tolerance(0.0) == TOLERANCE_FLOOR
    assert calibrated_tolerance(TOLERANCE_FLOOR / TOLERANCE_FACTOR / 10) == TOLERANCE_FLOOR


def test_it_rejects_fp16_accumulation_on_normal_inputs_at_k_2048():
    k = 2048
    a = torch.randn(32, k, generator=generator(11)).half()
    b = torch.randn(k, 32, generator=generator(12)).half()
    ref = exact(a, b)
    library_error = relative_frobenius_error(fp32_accumulated(a, b), ref)
    tolerance = calibrated_tolerance(library_error)
    assert relative_frobenius_error(fp32_accumulated(a, b), ref) <= tolerance
    assert relative_frobenius_error(simulate_fp16_accumulation(a, b), ref) > tolerance
