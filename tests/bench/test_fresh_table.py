"""The honest replay table's shapes (bench/fresh_shapes.py, bench/family_sweep.py --shapes) and
the shipped policy's rebuild (python -m engine pretrain-policy)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine import cli
from engine.propose.policy import Policy, policy_families
from tests import bench_scripts

ROOT = Path(__file__).resolve().parents[2]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"


def test_fresh_shapes_are_drawn_reproducibly_from_shapes_no_table_holds():
    fresh = bench_scripts.load("fresh_shapes")
    results = ROOT / "bench" / "results"
    drawn = fresh.fresh_shapes(results, count=16, seed=2031)
    assert drawn == fresh.fresh_shapes(results, count=16, seed=2031)
    assert len(set(drawn)) == 16
    assert not set(drawn) & fresh.recorded_shapes(results)
    assert "4096x4096x4096" in fresh.recorded_shapes(results)


def test_a_sweep_times_the_shapes_it_is_given():
    sweep = bench_scripts.load("family_sweep")
    plan = sweep.timing_plan(["nn=0:2"], ("64x128x256", "512x512x64", "1024x64x64"))
    assert [(shape, layout.value) for shape, layout in plan] == [
        ("64x128x256", "nn"),
        ("512x512x64", "nn"),
    ]


def test_the_shipped_policy_is_rebuilt_from_every_recorded_table(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "a").mkdir(parents=True)
    shutil.copy(RUN1, results / "a" / "families-run1.json")
    out = tmp_path / "pretrained"
    args = ["pretrain-policy", "--results", str(results), "--out-dir", str(out), "--steps", "3"]
    assert cli.main(args) == 0
    policy = Policy.load(out / "sm_90.pt", policy_families("sm_90"))
    assert policy is not None
    assert policy.trained_on == [f"{results / 'a' / 'families-run1.json'} (16 problems)"]
    assert "sm_90: 16 recorded problems" in capsys.readouterr().out
