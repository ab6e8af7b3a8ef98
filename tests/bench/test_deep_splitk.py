"""bench/deep_splitk.py's odd-N set without a GPU: which configs it times and on which shapes
(the GPU stage `TILES_SETS=oddn bash bench/device/gpu_run.sh tiles` runs the real one)."""

from __future__ import annotations

import math

import pytest

from engine.problem import Problem
from tests.bench_scripts import load

SMS = 132


@pytest.fixture(scope="module")
def bench():
    return load("deep_splitk")


def useful_fraction(problem: Problem, tile_m: int, tile_n: int) -> float:
    """C's area over the area of the tile slots the SMs run (the tiles' padding beyond M and N,
    and the idle SMs of the last wave, are waste)."""
    tiles = math.ceil(problem.m / tile_m) * math.ceil(problem.n / tile_n)
    return problem.m * problem.n / (math.ceil(tiles / SMS) * SMS * tile_m * tile_n)


def test_the_odd_n_set_times_each_odd_tile_beside_the_same_schedule_at_128_and_256(bench):
    configs = bench.odd_n_configs()
    odd = [c for c in configs if c.tile_n in bench.ODD_N]
    assert len(odd) == 12
    assert len(configs) - len(odd) == 8
    for config in odd:
        for width in (128, 256):
            twins = [
                c
                for c in configs
                if (c.schedule, c.tile_m, c.tile_n, c.cluster_m)
                == (config.schedule, config.tile_m, width, config.cluster_m)
            ]
            assert len(twins) == 1, (config.name, width)
    for shape in bench.ODD_N_SHAPES.split(","):
        assert bench.valid_for(Problem.parse(shape), configs) == configs


def test_its_shapes_are_where_an_odd_tile_wastes_less_of_the_sms_but_one_control(bench):
    better = []
    for shape in bench.ODD_N_SHAPES.split(","):
        problem = Problem.parse(shape)
        odd = max(useful_fraction(problem, m, n) for m in (64, 128) for n in bench.ODD_N)
        even = max(useful_fraction(problem, m, n) for m in (64, 128) for n in (128, 256))
        better.append(odd > even)
    assert better == [True, True, True, True, False]
