"""engine.campaign.replay and ``python -m engine replay``: strategies against recorded H200
measurements with held-out shapes (a quick version of the benchmark)."""

from __future__ import annotations

import json
from pathlib import Path

from engine import cli
from engine.campaign import ReplayTable
from engine.campaign.replay import format_table, replay_benchmark

ROOT = Path(__file__).resolve().parents[2]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"


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
    assert set(summary) == {"random", "evolve", "rl"}
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
