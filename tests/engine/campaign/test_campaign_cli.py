"""``python -m engine optimize`` with a replay table: live progress, results JSON, and a re-run
after Ctrl-C resumes without running any candidate twice."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from engine import cli
from engine.campaign.storage import SqliteStorage
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


# ---- the finals: what optimize prints, writes and exits with ---------------------------------


class FakeGpuExecutor:
    """Stands in for LocalGpuExecutor: every candidate verified, its time from its name."""

    needs_libraries = False
    arch = "sm_90"
    mps = "off"

    def __init__(self, **_kwargs):
        pass

    def execute(self, problem, batch):
        from engine.execution.executor import Outcome
        from engine.outcomes import CandidateStatus

        baselines = {"cublaslt_autotune": 1e-5, "torch": 1.2e-5}
        return [
            Outcome(
                c.name,
                CandidateStatus.OK,
                seconds=(9 + zlib.crc32(c.name.encode()) % 1000 / 100) * 1e-6,
                baselines=baselines,
            )
            for c in batch
        ]


def final_of(kernels: dict[str, float]) -> dict:
    """A final summary timing ``kernels`` (name → seconds) beside cuBLASLt-autotune at 10 us."""
    protocol = {
        "seconds": dict(kernels),
        "speedups": {n: {"cublaslt_autotune": 1e-5 / t} for n, t in kernels.items()},
        "rejected_while_timed": [],
        "best_baselines": {"cublaslt_autotune": {"seconds": 1e-5}},
    }
    return {"protocols": {"device": protocol}, "environment": {}, "sanitize": {}}


def gpu_argv(tmp_path: Path) -> list[str]:
    return [
        "optimize",
        "--shapes",
        "1024x1024x1024,2048x2048x1024",
        "--layout",
        "nn",
        "--budget",
        "4",
        "--batch",
        "4",
        "--proposers",
        "random",
        "--space",
        "library",
        "--families",
        "sm80",
        "--final-top",
        "2",
        "--db",
        str(tmp_path / "c.sqlite"),
        "--out",
        str(tmp_path / "results.json"),
    ]


def test_optimize_writes_the_finals_choice_and_exits_non_zero_for_a_shape_without_one(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(optimize, "LocalGpuExecutor", FakeGpuExecutor)
    chosen = {}

    def finals(results, **_kwargs):
        # the search's results are on disk before the finals start
        written = json.loads((tmp_path / "results.json").read_text())
        assert [p["candidates"] for p in written["problems"]] == [4, 4]
        first, second = results
        slowest = max(first.records, key=lambda r: r.seconds)  # not the search's best
        chosen[first.problem.key] = slowest.name
        return {
            first.problem.key: final_of({slowest.name: 8e-6, first.records[0].name: 9e-6}),
            second.problem.key: {"error": "no kernel passed: the 4 best verified kernels tried"},
        }

    monkeypatch.setattr(optimize, "final_measurements", finals)
    assert cli.main(gpu_argv(tmp_path)) == 1
    captured = capsys.readouterr()
    assert "1 of 2 shapes have no final kernel: 2048x2048x1024_nn" in captured.err
    report = json.loads((tmp_path / "results.json").read_text())
    first, second = report["problems"]
    assert first["best"] == chosen["1024x1024x1024_nn"] != first["search_best"]
    assert first["best_speedups"] == {"cublaslt_autotune": pytest.approx(1.25)}
    assert first["best_from"] == "final (device)"
    assert (second["best"], second["best_speedups"]) == (None, {})
    assert second["final_error"].startswith("no kernel passed")
    assert (
        f"final {chosen['1024x1024x1024_nn']} vs cublaslt_autotune: device 1.250x" in captured.out
    )
    assert "2048x2048x1024_nn: 4 candidates (budget), no final: no kernel passed" in captured.out


def test_optimize_keeps_the_search_results_when_the_finals_fail(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(optimize, "LocalGpuExecutor", FakeGpuExecutor)

    def broken(results, **_kwargs):
        raise RuntimeError("the finals crashed")

    monkeypatch.setattr(optimize, "final_measurements", broken)
    with pytest.raises(RuntimeError, match="the finals crashed"):
        cli.main(gpu_argv(tmp_path))
    report = json.loads((tmp_path / "results.json").read_text())
    assert [p["candidates"] for p in report["problems"]] == [4, 4]
    assert all(p["best"] for p in report["problems"])


def test_the_best_speedups_of_a_shape_are_one_candidates():
    from engine.campaign.loop import ProblemResult
    from engine.outcomes import CandidateRecord
    from engine.problem import Problem

    def record(name, seconds, baselines):
        return CandidateRecord(
            name=name,
            family="sm80",
            knobs={},
            proposer="rl",
            status="ok",
            reward=0.0,
            seconds=seconds,
            baselines=baselines,
        )

    # a beats cuBLASLt-autotune by more, b beats torch by more (its torch was slow that batch)
    a = record("a", 1.0, {"cublaslt_autotune": 1.2, "torch": 1.1})
    b = record("b", 1.0, {"cublaslt_autotune": 1.1, "torch": 1.5})
    result = ProblemResult(Problem(64, 64, 64), [a, b], stopped="budget")
    assert result.best_speedups("cublaslt_autotune") == a.speedups()
    assert result.best_speedups("torch") == b.speedups()


def test_optimize_says_where_the_time_went_in_its_summary_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(optimize, "LocalGpuExecutor", FakeGpuExecutor)

    def finals(results, **_kwargs):
        return {r.problem.key: final_of({r.records[0].name: 8e-6}) for r in results}

    monkeypatch.setattr(optimize, "final_measurements", finals)
    assert cli.main(gpu_argv(tmp_path)) == 0
    out = capsys.readouterr().out
    times = json.loads((tmp_path / "results.json").read_text())["throughput"]
    assert times["candidates"] == 8
    parts = times["setup_seconds"] + times["search_seconds"] + times["final_seconds"]
    assert parts <= times["wall_seconds"] + 0.01
    assert times["wall_seconds"] == times["to_final_seconds"]
    assert 0 <= times["gpu_busy_fraction"] <= 1
    assert times["setup_seconds"] <= times["first_verified_seconds"] <= times["wall_seconds"]
    assert times["candidates_per_wall_hour"] > 0
    assert f"time: {times['wall_seconds']:.0f} s wall (setup" in out
    assert "GPU busy" in out
    assert "per wall-hour" in out
    assert "first verified kernel after" in out


@pytest.mark.gpu
@pytest.mark.nvcc
def test_optimize_on_the_gpu_runs_every_shapes_rounds_and_says_where_the_time_went(
    tmp_path, monkeypatch, capsys
):
    """The real path: nvcc builds the rounds in the background while the GPU verifies and times
    the other shape's round, then the finals."""
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    args = gpu_argv(tmp_path)
    args[args.index("--batch") + 1] = "2"
    args[args.index("--final-top") + 1] = "1"
    args += ["--device-seconds", "1", "--final-device-seconds", "1", "--no-save-policy"]
    args += ["--final-torch-baselines", ""]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "results.json").read_text())
    times = report["throughput"]
    assert [p["candidates"] for p in report["problems"]] == [4, 4]
    assert times["candidates"] == 8
    assert 0 < times["gpu_busy_fraction"] <= 1
    assert times["first_verified_seconds"] <= times["wall_seconds"]
    assert times["final_seconds"] > 0
    compiles = times["compiles"]
    assert compiles["background"] is True
    storage = SqliteStorage(tmp_path / "c.sqlite")
    (name,) = storage.campaign_names()
    names = {r.name for p in storage.problems(name) for r in storage.candidates(name, p.key)}
    assert compiles["built"] + compiles["cached"] + compiles["failed"] == len(names)  # once each
    assert compiles["batches"] >= 2  # the first rounds together, then each shape's next
    assert "GPU busy" in out


def test_the_kernel_cache_says_how_many_configs_it_lacks(tmp_path):
    from engine.codegen.sm80 import Sm80Config
    from engine.compilation.compile import compile_configs
    from engine.problem import Layout
    from tests.engine.compile_fakes import fake_nvcc, machine

    config = machine(tmp_path, fake_nvcc(tmp_path))
    configs = [Sm80Config(layout=Layout.TN), Sm80Config(layout=Layout.NN)]
    assert optimize.uncached(configs, config=config, arch="sm_90") == 2
    compile_configs(configs[:1], config=config, target_arch="sm_90")
    assert optimize.uncached(configs, config=config, arch="sm_90") == 1


def test_a_campaign_with_an_empty_cache_says_how_long_its_first_compiles_will_take(
    tmp_path, monkeypatch, capsys
):
    from engine.compilation.compile import CompileResult
    from tests.engine.compile_fakes import fake_nvcc

    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGINE_NVCC", str(fake_nvcc(tmp_path)))

    class NeedsLibraries(FakeGpuExecutor):
        needs_libraries = True

    def compile_configs(configs, **_kwargs):
        library = tmp_path / "lib.so"
        return [
            CompileResult(True, library, "x", ("sm_90a",), "nvcc", "", 40.0, False) for _ in configs
        ]

    monkeypatch.setattr(optimize, "LocalGpuExecutor", NeedsLibraries)
    monkeypatch.setattr(optimize, "compile_configs", compile_configs)
    monkeypatch.setattr(optimize, "final_measurements", lambda results, **_: {})
    cli.main([*gpu_argv(tmp_path), "--jobs", "3"])
    out = capsys.readouterr().out
    # two shapes' first rounds of 4 (no config in both): 8 builds of 45 s, 3 at once
    assert "compiles: 8 of the first rounds' 8 configs are not in the kernel cache" in out
    assert "about 0:02:15 on 3 jobs before the GPU starts" in out
    assert "compiles: 8 built (320 s of compiler time in 1 batch," in out


def test_optimize_searches_with_the_engines_mix_unless_told_otherwise():
    from engine.propose.mix import DEFAULT_MIX

    assert optimize.parse_mix(None, None) == DEFAULT_MIX
    assert optimize.parse_mix("rl,evolve", None) == {"rl": 0.5, "evolve": 0.5}
    assert optimize.parse_mix(None, "seed=0.5,rl=0.5") == {"seed": 0.5, "rl": 0.5}


def test_the_first_builds_estimate_weighs_each_familys_build_time():
    from engine.codegen import LongKConfig, Sm90Config
    from engine.problem import Layout

    cutlass = [Sm90Config(layout=Layout.NN)] * 4
    longk = [LongKConfig(layout=Layout.NN)] * 4
    assert "about 0:01:30 on 2 jobs" in optimize.first_builds_estimate(cutlass, 8, jobs=2)
    assert "about 0:00:08 on 2 jobs" in optimize.first_builds_estimate(longk, 8, jobs=2)
    assert "about 0:00:45 on 16 jobs" in optimize.first_builds_estimate(cutlass, 8, jobs=16)
