"""Dynamic M: which kernel serves which Ms of an (N, K, layout) (engine.publish.bundle.buckets)."""

from __future__ import annotations

import itertools
import math

import pytest

from engine.problem import ProblemError
from engine.publish.bundle.buckets import Bucket, Point, buckets, crossover, expand_shapes


def always(_kernel: str, _m: int) -> bool:
    return True


def test_without_crossing_timings_the_boundary_is_the_nearer_point_on_a_log_scale():
    points = [Point(16, "a", {"a": 0.9}), Point(256, "b", {"b": 0.8})]
    # sqrt(16·256) = 64: M = 64 is as near to 16 as to 256 on a log scale and stays left
    assert buckets(points, always) == [Bucket(16, 64, 16, "a"), Bucket(65, 256, 256, "b")]


def test_with_both_kernels_timed_at_both_points_the_boundary_is_the_measured_crossover():
    # a beats b by 10 % at 16; b beats a by 10 % at 1024: log-linear crossing at 128, not 128
    # by coincidence of the midpoint alone, so the second case moves it
    left = Point(16, "a", {"a": 0.9, "b": 0.99})
    right = Point(1024, "b", {"a": 0.99, "b": 0.9})
    assert math.isclose(crossover(left, right), 128.0)
    skewed = Point(1024, "b", {"a": 0.99 * 3, "b": 0.9})  # b wins by far more at 1024
    cross = crossover(left, skewed)
    assert cross is not None
    assert 16 < cross < 128
    got = buckets([left, skewed], always)
    assert got == [
        Bucket(16, math.ceil(cross) - 1, 16, "a"),
        Bucket(math.ceil(cross), 1024, 1024, "b"),
    ]


def test_a_kernel_hands_over_to_torch_matmul_at_the_crossover_with_torch():
    # torch.matmul (None) is 1 by definition; the kernel is 0.8 at 64 and 1.25 at 4096
    left, right = Point(64, "a", {"a": 0.8}), Point(4096, None, {"a": 1.25})
    assert math.isclose(crossover(left, right), 512.0)
    assert buckets([left, right], always) == [
        Bucket(64, 511, 64, "a"),
        Bucket(512, 4096, 4096, None),
    ]


def test_lines_that_do_not_cross_between_the_points_give_the_log_midpoint():
    left = Point(16, "a", {"a": 0.9, "b": 0.95})
    right = Point(256, "b", {"a": 0.85, "b": 0.95})  # a still faster at 256: no crossing
    assert crossover(left, right) is None
    assert buckets([left, right], always)[0] == Bucket(16, 64, 16, "a")


def test_ms_outside_the_measured_points_are_not_served():
    got = buckets([Point(128, "a", {"a": 0.9})], always)
    assert got == [Bucket(128, 128, 128, "a")]


def test_a_kernel_invalid_at_its_range_ends_serves_only_its_own_m():
    points = [Point(16, None, {}), Point(128, "llm", {"llm": 0.9}), Point(1024, None, {})]

    def only_measured(kernel: str, m: int) -> bool:
        return m == 128

    got = [(b.lo, b.hi, b.kernel) for b in buckets(points, only_measured)]
    assert got == [(16, 127, None), (128, 128, "llm"), (129, 1024, None)]


def test_buckets_are_disjoint_and_cover_the_measured_span():
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    points = [
        Point(m, f"k{i % 3}" if i % 4 else None, {f"k{i % 3}": 0.9}) for i, m in enumerate(ms)
    ]
    got = buckets(points, always)
    assert got[0].lo == 1
    assert got[-1].hi == 8192
    for left, right in itertools.pairwise(got):
        assert right.lo == left.hi + 1
    for b in got:
        assert b.lo <= b.m <= b.hi or b.kernel is None


def test_two_points_at_one_m_are_rejected():
    with pytest.raises(ValueError, match="same M"):
        buckets([Point(16, "a", {}), Point(16, "b", {})], always)


def test_an_m_range_expands_to_its_powers_of_two_and_its_ends():
    ms = [int(s.split("x")[0]) for s in expand_shapes("M=1..8192:4096x4096")]
    assert ms == [1 << e for e in range(14)]
    assert expand_shapes("M=3..20:64x32, 8x8x8") == [
        "3x64x32",
        "4x64x32",
        "8x64x32",
        "16x64x32",
        "20x64x32",
        "8x8x8",
    ]


@pytest.mark.parametrize("bad", ["M=8..1:64x64", "M=0..4:64x64", "M=1-8:64x64", "M=1..8"])
def test_a_malformed_m_range_is_a_problem_error(bad):
    with pytest.raises(ProblemError, match="bad M range"):
        expand_shapes(bad)
