"""engine.campaign.replay_benchmark and ``python -m engine replay``: strategies against recorded
H200 measurements with held-out shapes (a quick version of the benchmark)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine import cli
from engine.campaign.replay_benchmark import (
    TARGET,
    default_tables,
    format_table,
    pretrained_policy,
    replay_benchmark,
    space_of,
    table_records,
)
from engine.execution.executor import ReplayTable

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
LIBRARY_RUN1 = ROOT / "bench/results/2026-12-03-h200-library/library-run1.json"


def test_the_replay_table_has_every_verified_config_and_the_baselines():
    table = ReplayTable.load([RUN1])
    assert len(table.configs) == 48
    assert len(table.problems()) == 16
    problem = next(p for p in table.problems() if p.key == "4096x4096x4096_tn")
    assert len(table.configs_for(problem)) == 24
    speedups = table.speedups(problem, "cublaslt_autotune")
    assert 0.8 < max(speedups.values()) < 1.0


def test_a_quick_replay_reports_every_strategy_on_held_out_shapes():
    table = ReplayTable.load([RUN1])
    report = replay_benchmark(
        table, seeds=1, budget=24, pretrain_steps=20, shapes=["4096x4096x4096", "1024x1024x1024"]
    )
    summary = report["summary"]["all"]
    assert set(summary) == {
        "random",
        "evolve",
        "rl",
        "transfer",
        "rl+transfer",
        "rl+evolve",
        "rl+evolve+transfer",
        "seed",
        "default",
    }
    assert {r["problem"] for r in report["runs"]} == {
        "4096x4096x4096_nn",
        "4096x4096x4096_tn",
        "1024x1024x1024_nn",
        "1024x1024x1024_tn",
    }
    for run in report["runs"]:
        curve = run["curve"]
        assert len(curve) == 24
        assert curve == sorted(curve)
        assert curve[-1] == 1.0
    assert "rl" in format_table(report)


def test_the_replay_command_writes_its_report(tmp_path, capsys):
    out = tmp_path / "replay.json"
    code = cli.main(
        [
            "replay",
            "--table",
            str(RUN1),
            "--seeds",
            "1",
            "--budget",
            "8",
            "--pretrain-steps",
            "5",
            "--shapes",
            "512x512x512",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["settings"]["held_out"].startswith("leave-one-shape-out")
    printed = capsys.readouterr().out
    assert "plot:" in printed


def test_the_default_table_is_the_dense_library_sweep_and_its_merged_rows_count_once():
    (default,) = default_tables()
    assert default.name == "library-run2.json"
    table = ReplayTable.load([default])
    assert len(table.configs) == 256
    assert len(table.problems()) == 28
    problem = next(p for p in table.problems() if p.key == "4096x4096x4096_nn")
    assert len(table.configs_for(problem)) == 192
    both = ReplayTable.load([LIBRARY_RUN1, default])
    assert both.seconds == table.seconds


def test_pretraining_on_other_shapes_finds_a_good_config_for_a_small_shape():
    (default,) = default_tables()
    table = ReplayTable.load([default])
    problems = {p.key: p for p in table.problems()}
    train = [problems[k] for k in ("64x64x64_nn", "256x256x256_nn", "4096x4096x4096_nn")]
    held = problems["128x128x128_nn"]
    policy = pretrained_policy(table, train, baseline="cublaslt_autotune", steps=100)
    speedups = table.speedups(held, "cublaslt_autotune")
    probabilities = policy.probabilities(held, space_of(table, held))
    top = max(probabilities, key=probabilities.get)
    assert speedups[top] >= TARGET * max(speedups.values())  # expected-reward ascent: 0.91


def test_the_transfer_strategy_knows_the_other_shapes_only():
    """Leave-one-shape-out holds both layouts of a shape out of what transfer starts from."""
    table = ReplayTable.load([RUN1])
    problems = table.problems()
    train = [p for p in problems if p.shape != "4096x4096x4096"]
    known = table_records(table, train, baseline="cublaslt_autotune")
    assert {p.key for p, _ in known} == {p.key for p in train}
    assert all(r.status == "ok" for _, r in known)
    speedups = table.speedups(train[0], "cublaslt_autotune")
    first = next(r for p, r in known if p == train[0])
    assert math.exp(first.reward) == pytest.approx(speedups[first.name])
