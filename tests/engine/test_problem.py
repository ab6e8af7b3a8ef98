"""engine.problem: parsing shapes and layouts, the alignment and size limits, derived values."""

from __future__ import annotations

import math

import pytest

from engine.problem import (
    ALIGN_ELEMENTS,
    MAX_DIM,
    MAX_OPERAND_BYTES,
    Layout,
    Problem,
    ProblemError,
)


def test_it_parses_a_plain_cube():
    problem = Problem.parse("4096x4096x4096")
    assert (problem.m, problem.n, problem.k) == (4096, 4096, 4096)
    assert problem.layout is Layout.NN


def test_it_accepts_surrounding_spaces_and_an_upper_case_x():
    problem = Problem.parse(" 64X64X64 ")
    assert (problem.m, problem.n, problem.k) == (64, 64, 64)


def test_it_takes_the_layout_as_text_or_as_a_layout():
    assert Problem.parse("64x64x64", "TN").layout is Layout.TN
    assert Problem.parse("64x64x64", Layout.TN).layout is Layout.TN
    assert Problem(64, 64, 64, "tn").layout is Layout.TN


@pytest.mark.parametrize(
    "text",
    [
        "4_096x8x8",
        "4096.0x8x8",
        "４０９６x8x8",  # full-width digits
        "4096x８x8",
        "-8x8x8",
        "+8x8x8",
        "abc",
        "",
        "   ",
        "8x8",
        "8x8x8x8",
        "8 x 8 x 8",
        "8*8*8",
        "0x10x8x8",
        "1e3x8x8",
    ],
)
def test_it_rejects_shapes_that_are_not_three_plain_numbers(text):
    with pytest.raises(ProblemError, match="MxNxK"):
        Problem.parse(text)


@pytest.mark.parametrize("value", [True, None, 4096, 4096.0, b"8x8x8", ["8x8x8"]])
def test_it_rejects_a_shape_that_is_not_text(value):
    with pytest.raises(ProblemError, match="shape must be text"):
        Problem.parse(value)


def test_a_problem_error_is_a_value_error():
    assert issubclass(ProblemError, ValueError)


@pytest.mark.parametrize("text", ["0x8x8", "8x0x8", "8x8x0"])
def test_it_rejects_a_zero_dimension(text):
    with pytest.raises(ProblemError, match="must be positive"):
        Problem.parse(text)


def test_it_names_the_nearest_valid_values_when_n_is_misaligned():
    with pytest.raises(ProblemError) as info:
        Problem.parse("8x9x8")
    message = str(info.value)
    assert "N=9" in message
    assert "multiple of 8" in message
    assert "8 and 16" in message


def test_it_names_the_nearest_valid_values_when_k_is_misaligned():
    with pytest.raises(ProblemError, match=r"K=1001 .* 1000 and 1008"):
        Problem.parse("8x8x1001")


def test_it_never_suggests_zero_as_a_nearest_valid_value():
    with pytest.raises(ProblemError, match="8 and 8"):
        Problem.parse("8x3x8")


def test_m_may_be_any_positive_value():
    assert Problem.parse("1x8x8").m == 1
    assert Problem.parse("1001x8x8").m == 1001


def test_it_rejects_a_dimension_over_the_limit():
    with pytest.raises(ProblemError, match="over the limit"):
        Problem(MAX_DIM + 1, 8, 8)
    with pytest.raises(ProblemError, match="over the limit"):
        Problem.parse(f"8x8x{MAX_DIM + ALIGN_ELEMENTS}")


def test_it_rejects_a_huge_number_of_digits_without_trouble():
    with pytest.raises(ProblemError, match="over the limit"):
        Problem.parse("9" * 400 + "x8x8")


def test_it_rejects_operands_that_need_too_much_memory():
    side = 163840  # A, B and C: about 50 GiB with K = 8
    assert side <= MAX_DIM
    with pytest.raises(ProblemError, match="GiB"):
        Problem(side, side, 8)


def test_it_accepts_operands_just_under_the_memory_limit():
    problem = Problem(131072, 131072, 8)
    assert problem.operand_bytes <= MAX_OPERAND_BYTES


@pytest.mark.parametrize("value", [True, False, None, 8.0, "8"])
def test_it_rejects_dimensions_that_are_not_whole_numbers(value):
    with pytest.raises(ProblemError, match="whole number"):
        Problem(value, 8, 8)


def test_layout_parse_reads_either_case_and_spaces():
    assert Layout.parse("nn") is Layout.NN
    assert Layout.parse(" TN ") is Layout.TN
    assert Layout.parse(Layout.TN) is Layout.TN


@pytest.mark.parametrize("text", ["nt", "tt", "", "n", None, 1])
def test_layout_parse_rejects_unknown_layouts(text):
    with pytest.raises(ProblemError, match="expected one of nn, tn"):
        Layout.parse(text)


def test_it_rejects_an_unknown_layout_given_with_a_shape():
    with pytest.raises(ProblemError, match="unknown layout"):
        Problem.parse("8x8x8", "nt")


def test_the_key_names_the_shape_and_the_layout():
    assert Problem(4096, 4096, 4096, Layout.TN).key == "4096x4096x4096_tn"
    assert str(Problem(1, 8, 16)) == "1x8x16_nn"
    assert Problem(1, 8, 16).shape == "1x8x16"


def test_flops_count_a_multiply_and_an_add_per_term():
    assert Problem(3, 8, 16).flops == 2 * 3 * 8 * 16


def test_operand_bytes_count_a_b_and_c_once_in_fp16():
    assert Problem(3, 8, 16).operand_bytes == 2 * (3 * 16 + 16 * 8 + 3 * 8)


def test_b_shape_follows_the_layout():
    assert Problem(3, 8, 16, Layout.NN).b_shape == (16, 8)
    assert Problem(3, 8, 16, Layout.TN).b_shape == (8, 16)


def test_problems_are_hashable_values():
    assert Problem.parse("8x8x8") == Problem(8, 8, 8)
    assert len({Problem(8, 8, 8), Problem(8, 8, 8), Problem(8, 8, 8, Layout.TN)}) == 2


def test_features_are_log2_sizes_aspect_ratios_and_the_layout():
    features = Problem(1024, 256, 64, Layout.TN).features()
    assert features == {
        "log2_m": 10.0,
        "log2_n": 8.0,
        "log2_k": 6.0,
        "log2_mn_over_k": 10.0 + 8.0 - 12.0,
        "log2_m_over_n": 2.0,
        "log2_flops": math.log2(2 * 1024 * 256 * 64),
        "layout_tn": 1.0,
    }
    assert Problem(1024, 256, 64).features()["layout_tn"] == 0.0


def test_features_are_finite_for_the_smallest_problem():
    assert all(math.isfinite(v) for v in Problem(1, 8, 8).features().values())
