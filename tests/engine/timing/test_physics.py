"""engine.timing.physics: the datasheet peaks and the floor below which a time is impossible."""

from __future__ import annotations

import pytest

from engine.problem import Problem
from engine.timing.physics import (
    PEAKS,
    UNKNOWN,
    floor_seconds,
    is_impossible,
    peaks_for,
    tflops,
)

CUBE = Problem(4096, 4096, 4096)
H200 = PEAKS["H200"]


def test_the_floor_of_4096_cubed_on_an_h200_is_about_139_microseconds():
    assert floor_seconds(CUBE, H200) == pytest.approx(139e-6, rel=0.01)


def test_the_floor_of_a_large_cube_is_compute_bound():
    assert floor_seconds(CUBE, H200) == CUBE.flops / H200.fp16_tensor_flops


def test_the_floor_of_a_skinny_shape_is_memory_bound():
    skinny = Problem(1, 8192, 8192)  # a GEMV: B alone is 128 MiB
    floor = floor_seconds(skinny, H200)
    assert floor == skinny.operand_bytes / H200.memory_bytes_per_s
    assert floor > skinny.flops / H200.fp16_tensor_flops
    assert floor == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / 4.8e12)


def test_the_floor_of_a_tiny_problem_is_the_launch_floor():
    assert floor_seconds(Problem(8, 8, 8), H200) == H200.launch_floor_s


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("nvidia h100 pcie", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ],
)
def test_peaks_for_matches_gpu_names_as_torch_reports_them(name, expected):
    assert peaks_for(name) is PEAKS[expected]


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", ""])
def test_peaks_for_an_unknown_gpu_is_the_generous_unknown_entry(name):
    assert peaks_for(name) is UNKNOWN


def test_the_unknown_floor_is_below_every_known_floor():
    for problem in (CUBE, Problem(1, 8192, 8192), Problem(8, 8, 8)):
        for peaks in PEAKS.values():
            assert floor_seconds(problem, UNKNOWN) <= floor_seconds(problem, peaks)


def test_a_time_below_the_floor_is_impossible_and_at_the_floor_is_not():
    floor = floor_seconds(CUBE, H200)
    assert is_impossible(floor * 0.99, CUBE, H200)
    assert is_impossible(0.0, CUBE, H200)
    assert not is_impossible(floor, CUBE, H200)
    assert not is_impossible(200e-6, CUBE, H200)


def test_tflops_divides_flops_by_time_and_is_zero_for_no_time():
    assert tflops(CUBE, 1e-3) == pytest.approx(CUBE.flops / 1e-3 / 1e12)
    assert tflops(CUBE, 0.0) == 0.0
    assert tflops(CUBE, -1.0) == 0.0
