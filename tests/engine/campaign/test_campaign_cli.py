"""``python -m engine optimize`` with a replay table: live progress, results JSON, and a re-run
after Ctrl-C resumes without running any candidate twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import cli
from engine.commands import optimize_command as optimize
from engine.execution.executor import ReplayExecutor

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"


@pytest.fixture
def counting_executor(monkeypatch):
    """Every ReplayExecutor the command builds shares one execution counter."""
    executed: dict[tuple[str, str], int] = {}

    class Counting(ReplayExecutor):
        def __init__(self, table, **kwargs):
            super().__init__(table, **kwargs)
            self.executed = executed

    monkeypatch.setattr(optimize, "ReplayExecutor", Counting)
    return executed


def argv(tmp_path: Path) -> list[str]:
    return [
        "optimize",
        "--shapes",
        "4096x4096x4096,1024x1024x1024",
        "--layout",
        "tn",
        "--budget",
        "12",
        "--batch",
        "4",
        "--proposers",
        "rl,evolve",
        "--db",
        str(tmp_path / "c.sqlite"),
        "--replay",
        str(RUN1),
        "--out",
        str(tmp_path / "results.json"),
    ]


def test_optimize_resumes_after_an_interrupt_without_running_anything_twice(
    tmp_path, monkeypatch, capsys, counting_executor
):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    seen = []

    def interrupt(record):
        seen.append(record)
        if len(seen) == 7:
            raise KeyboardInterrupt

    monkeypatch.setattr(optimize, "after_record_hook", interrupt)
    assert cli.main(argv(tmp_path)) == 130
    assert "run the same command again" in capsys.readouterr().err
    done_before = sum(counting_executor.values())
    assert 0 < done_before < 24

    monkeypatch.setattr(optimize, "after_record_hook", None)
    assert cli.main(argv(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "ETA" in out
    assert "cublaslt_autotune" in out
    assert set(counting_executor.values()) == {1}
    assert sum(counting_executor.values()) == 24
    report = json.loads((tmp_path / "results.json").read_text())
    assert [p["candidates"] for p in report["problems"]] == [12, 12]
    assert all(p["best_speedups"]["cublaslt_autotune"] > 0.5 for p in report["problems"])
    assert (tmp_path / "cache" / "policy" / "sm_90.pt").is_file()


def test_optimize_rejects_an_unknown_proposer(tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main([*argv(tmp_path), "--proposers", "rl,magic"])
    assert "proposers must be from" in str(info.value.code)


def test_optimize_pretrains_the_policy_on_recorded_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    args = [*argv(tmp_path), "--pretrain", str(RUN1), "--pretrain-steps", "5"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "pretrained on 16 recorded problems (5 steps)" in out


def test_optimize_names_a_missing_pretraining_table(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit, match="no such pretraining table"):
        cli.main([*argv(tmp_path), "--pretrain", str(tmp_path / "nope.json")])


def test_optimize_takes_the_llm_proposer_only_for_gpu_runs_with_a_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    base = [a if a != "rl,evolve" else "llm,evolve" for a in argv(tmp_path)]
    with pytest.raises(SystemExit, match="needs a GPU run"):
        cli.main(base)
    no_replay = base[: base.index("--replay")] + base[base.index("--replay") + 2 :]
    with pytest.raises(SystemExit, match="needs --llm-model"):
        cli.main(no_replay)
