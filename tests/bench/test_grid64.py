"""bench/grid64.py: the 64-shape campaign's shapes are the same in every session, balanced over
the size classes, from CUDA-L2's grid, with a quarter of them also in TN."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from tests import bench_scripts
from tests.campaign_dbs import write_campaign

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "grid64.py"


@pytest.fixture(scope="module")
def g() -> ModuleType:
    return bench_scripts.load("grid64")


def test_it_draws_64_distinct_grid_shapes_balanced_over_the_size_classes(g):
    shapes = g.grid64()
    assert len(set(shapes)) == 64
    assert all(d in g.SIZES for shape in shapes for d in shape)
    assert Counter(g.size_class(*s) for s in shapes) == {"small": 21, "medium": 22, "large": 21}


def test_every_session_gets_the_same_shapes_and_tn_is_every_fourth(g):
    assert g.grid64() == g.grid64()
    tn = g.shapes_for("tn")
    assert len(tn) == 16
    assert set(tn) <= set(g.shapes_for("nn"))
    assert {g.size_class(*s) for s in tn} == {"small", "medium", "large"}


def test_the_script_prints_shapes_the_cli_parses_and_rejects_a_bad_layout():
    from engine.problem import Problem

    env = {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "tn"], capture_output=True, text=True, env=env, check=True
    )
    printed = done.stdout.strip().split(",")
    assert [Problem.parse(s).shape for s in printed] == printed
    assert len(printed) == 16
    bad = subprocess.run([sys.executable, str(SCRIPT), "nt"], capture_output=True, env=env)
    assert bad.returncode == 2


def test_the_summary_gives_each_shapes_best_search_speedup_and_its_failures(g, tmp_path):
    from engine.outcomes import CandidateRecord
    from engine.problem import Problem

    def record(name, seconds, status="ok", reason=""):
        return CandidateRecord(
            name=name, family="sm80", knobs={}, proposer="rl", status=status, reason=reason,
            reward=0.0, seconds=seconds, baselines={"cublaslt_autotune": 1.0},
        )  # fmt: skip

    small, large = Problem(64, 64, 64), Problem(8192, 8192, 8192)
    db = write_campaign(
        tmp_path / "grid.sqlite",
        "c",
        {
            small: [record("a", 2.0), record("b", 0.5)],
            large: [record("x", 1.25), record("y", None, "rejected", "gpu_memory")],
        },
    )
    summary = g.search_summary(db)
    shapes = {s["problem"]: s for s in summary["shapes"]}
    assert shapes[small.key]["best_speedup"] == 2.0
    assert shapes[large.key]["best_speedup"] == 0.8
    assert shapes[large.key]["failures"] == {"gpu_memory": 1}
    assert shapes[large.key]["verified"] == 1
    assert summary["geomean"] == pytest.approx((2.0 * 0.8) ** 0.5)
    assert summary["faster_fraction"] == 0.5
    assert "not the finals" in summary["measurements"]


def test_the_summary_refuses_a_missing_database_and_creates_none(g, tmp_path):
    missing = tmp_path / "typo.sqlite"
    with pytest.raises(FileNotFoundError, match="no campaign database"):
        g.search_summary(missing)
    assert not missing.exists()


def test_the_focus_is_where_the_campaign_misses_its_two_goals(g):
    db = ROOT / "bench/results/grid64/campaign.sqlite"
    summary = {s["problem"]: s for s in g.search_summary(db)["shapes"]}
    chosen = g.focus(db, "nn", 16)
    speedups = [summary[f"{shape}_nn"]["best_speedup"] for shape in chosen]
    assert speedups[:16] == sorted(speedups[:16])  # the slowest first
    assert max(speedups) < 1
    slower_nn = sorted(
        s["best_speedup"] for k, s in summary.items() if k.endswith("_nn") and s["best_speedup"] < 1
    )
    assert speedups[:16] == slower_nn[:16]
    large_under = {
        k.removesuffix("_nn")
        for k, s in summary.items()
        if k.endswith("_nn") and s["size_class"] == "large" and s["best_speedup"] < g.LARGE_FLOOR
    }
    assert large_under <= set(chosen)
    assert len(chosen) == len(set(chosen))


def test_the_campaign_name_is_the_one_the_committed_database_holds(g):
    from engine.campaign.storage import SqliteStorage

    storage = SqliteStorage(ROOT / "bench/results/grid64/campaign.sqlite")
    try:
        names = storage.campaign_names()
    finally:
        storage.close()
    assert g.campaign_name("nn") in names
    assert g.campaign_name("tn") in names
