"""bench/longk_bench.py's logic without a GPU: which config sets it times, and how a variant (push,
L2 prefetch) is read against its twin (the GPU stage `bash bench/device/gpu_run.sh longk` runs
the real one)."""

from __future__ import annotations

import json

import pytest

from engine.problem import Layout
from tests.bench_scripts import load


@pytest.fixture(scope="module")
def bench():
    return load("longk_bench")


def test_every_variant_set_holds_twins_of_the_pull_library(bench):
    searched = {c.name for c in bench.configs_of("longk-pull", Layout.NN)}
    variants = bench.configs_of("longk-push,longk-prefetch", Layout.NN)
    assert variants
    for config in variants:
        _, twin = bench.twin_of(config.name)
        pull = twin.removesuffix("_push")
        assert pull in searched, config.name


def test_the_variants_set_times_each_variant_beside_its_twin(bench):
    configs = bench.configs_of("longk-variants", Layout.NN)
    names = {c.name for c in configs}
    assert all(bench.twin_of(n) is None or bench.twin_of(n)[1] in names for n in names)
    assert sum(bench.twin_of(n) is None for n in names) == 8  # the pull twins


def test_a_variant_is_read_against_its_twin_only(bench, tmp_path, capsys):
    report = {
        "shapes": [
            {
                "problem": "128x128x16384_nn",
                "speedups": {
                    "hgemm_longk_64x64x64_s8_nn_cluster16": 1.0,
                    "hgemm_longk_64x64x64_s8_nn_cluster16_push": 1.1,
                    "hgemm_longk_64x64x64_s8_nn_cluster16_pf": 0.9,
                    "hgemm_longk_64x64x64_s8_nn_cluster16_push_pf": 1.21,
                    "hgemm_longk_64x64x64_s8_nn_cluster16_mc2": 0.5,
                    "hgemm_longk_64x128x64_s8_nn_cluster4_push": 1.3,  # its twin was not timed
                },
            },
            {"problem": "256x128x4096_nn", "error": "no verified kernel"},
        ]
    }
    rows = bench.variant_ratios(report)
    ratios = {
        (r["variant"].removeprefix("hgemm_longk_64x64x64_s8_nn_cluster16"), r["change"]): r["ratio"]
        for r in rows
    }
    assert ratios == pytest.approx(
        {
            ("_push", "push"): 1.1,
            ("_pf", "prefetch"): 0.9,
            ("_push_pf", "prefetch"): 1.1,
            ("_mc2", "multicast"): 0.5,
        }
    )
    path = tmp_path / "longk.json"
    path.write_text(json.dumps(report))
    assert bench.main(["--compare", str(path)]) == 0
    assert "1.100  hgemm_longk_64x64x64_s8_nn_cluster16_push_pf" in capsys.readouterr().out


def test_the_groups_set_times_the_grouped_configs_beside_the_h100_winners(bench):
    configs = bench.configs_of("longk-groups", Layout.NN)
    grouped = [c for c in configs if c.groups > 1]
    single = [c for c in configs if c.groups == 1]
    assert len(grouped) == 18
    assert {c.name for c in single} <= {c.name for c in bench.configs_of("longk-pull", Layout.NN)}
    assert single


def test_the_fastest_grouped_config_is_read_against_the_fastest_single_cluster_one(bench):
    report = {
        "shapes": [
            {
                "problem": "128x128x16384_nn",
                "speedups": {
                    "hgemm_longk_64x64x64_s8_nn_cluster16": 1.0,
                    "hgemm_longk_64x32x64_s8_nn_cluster8": 0.9,
                    "hgemm_longk_64x64x64_s8_nn_cluster4_g4": 1.1,
                    "hgemm_longk_64x32x64_s8_nn_cluster8_g2": 0.8,
                    "hgemm_sm80_64x64x64_w2x2_s4_nn_sw1_splitk16_cluster": 1.5,
                },
            },
            {"problem": "256x128x4096_nn", "speedups": {"hgemm_longk_64x64x64_s8_nn_cluster8": 1}},
        ]
    }
    rows = bench.grouped_vs_single(report)
    assert rows == [
        {
            "problem": "128x128x16384_nn",
            "grouped": "hgemm_longk_64x64x64_s8_nn_cluster4_g4",
            "single": "hgemm_longk_64x64x64_s8_nn_cluster16",
            "ratio": pytest.approx(1.1),
        }
    ]


def test_the_interleave_set_times_each_dealt_config_beside_its_sliced_twin(bench):
    configs = bench.configs_of("longk-interleave", Layout.NN)
    dealt = [c.name for c in configs if c.interleave]
    names = {c.name for c in configs}
    assert dealt
    assert len(names) == 2 * len(dealt)
    assert all(bench.twin_of(n) == ("_il", n.removesuffix("_il")) for n in dealt)
    assert all(bench.twin_of(n)[1] in names for n in dealt)
    assert bench.twin_of("hgemm_longk_64x64x64_s6_nn_cluster8_send_il") == (
        "_il",
        "hgemm_longk_64x64x64_s6_nn_cluster8_send",
    )
