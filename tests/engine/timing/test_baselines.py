"""engine.timing.baselines: a problem's baseline time is the faster of its two layouts; cuBLASLt's
autotuned choice is timed once per shape and environment and kept on disk."""

from __future__ import annotations

import json

import pytest

from engine.timing.baselines import BASELINES, best_of_layouts


def test_it_picks_the_faster_layout_for_each_baseline():
    seconds = {
        "torch_nn": 2.0e-4,
        "torch_tn": 1.5e-4,
        "cublas_nn": 1.4e-4,
        "cublas_tn": 1.6e-4,
        "cublaslt_heuristic_nn": 1.45e-4,
        "cublaslt_heuristic_tn": 1.44e-4,
        "cublaslt_autotune_nn": 1.41e-4,
        "cublaslt_autotune_tn": 1.42e-4,
        "my_kernel": 1.0e-4,
    }
    assert best_of_layouts(seconds) == {
        "torch": {"seconds": 1.5e-4, "layout": "tn"},
        "cublas": {"seconds": 1.4e-4, "layout": "nn"},
        "cublaslt_heuristic": {"seconds": 1.44e-4, "layout": "tn"},
        "cublaslt_autotune": {"seconds": 1.41e-4, "layout": "nn"},
    }


def test_a_baseline_measured_in_one_layout_only_uses_that_layout():
    assert best_of_layouts({"cublas_tn": 3.0, "torch_nn": 2.0}) == {
        "cublas": {"seconds": 3.0, "layout": "tn"},
        "torch": {"seconds": 2.0, "layout": "nn"},
    }


def test_a_baseline_that_was_not_measured_is_left_out():
    best = best_of_layouts({"torch_nn": 1.0, "torch_tn": 1.0})
    assert list(best) == ["torch"]
    assert best["torch"]["layout"] == "nn"  # a tie goes to the first layout


def test_it_does_not_mistake_cublaslt_times_for_cublas_times():
    best = best_of_layouts({"cublaslt_autotune_nn": 1.0, "cublas_nn": 5.0})
    assert best["cublas"]["seconds"] == 5.0
    assert best["cublaslt_autotune"]["seconds"] == 1.0


def test_the_autotuned_pick_never_stands_when_the_heuristic_choice_was_faster_in_the_same_run():
    best = best_of_layouts(
        {
            "cublaslt_heuristic_nn": 9.50e-6,
            "cublaslt_autotune_nn": 9.67e-6,  # picked in a short selection run; slower here
            "cublaslt_heuristic_tn": 9.70e-6,
            "cublaslt_autotune_tn": 9.60e-6,
        }
    )
    assert best["cublaslt_autotune"] == {"seconds": 9.50e-6, "layout": "nn", "choice": "heuristic"}
    assert best["cublaslt_heuristic"] == {"seconds": 9.50e-6, "layout": "nn"}


def test_an_autotuned_pick_that_beats_the_heuristic_is_kept():
    best = best_of_layouts({"cublaslt_heuristic_tn": 2.0, "cublaslt_autotune_tn": 1.5})
    assert best["cublaslt_autotune"] == {"seconds": 1.5, "layout": "tn"}


def test_candidates_are_never_baselines():
    assert best_of_layouts({"candidate": 1.0, "my_kernel_nn": 1.0}) == {}


def test_the_baselines_are_nvidias_four_then_what_torch_tunes_itself():
    assert BASELINES == (
        "torch",
        "cublas",
        "cublaslt_heuristic",
        "cublaslt_autotune",
        "inductor_max_autotune",
        "tunableop",
    )


def test_inductor_and_tunableop_times_take_the_faster_layout_like_the_others():
    best = best_of_layouts(
        {
            "inductor_max_autotune_nn": 6.1e-6,
            "inductor_max_autotune_tn": 5.8e-6,
            "tunableop_nn": 7.0e-6,
            "tunableop_tn": 7.2e-6,
            "mine": 1.0e-6,
        }
    )
    assert best == {
        "inductor_max_autotune": {"seconds": 5.8e-6, "layout": "tn"},
        "tunableop": {"seconds": 7.0e-6, "layout": "nn"},
    }


# -- the cuBLASLt autotune cache: once per shape and environment, on disk ----------
class FakeShim:
    """cuBLASLt's heuristic list: ``count`` algorithms per plan; algorithm i is the i-th tile
    id, with split-K i + 1."""

    def __init__(self, count: int = 5) -> None:
        self.count = count

    def cublaslt_plan(self, m, n, k, tn, workspace, max_algos):
        return 1, min(self.count, max_algos)

    def cublaslt_algo_config(self, plan, algo, count):
        from engine.gpu.runtime import LoadError

        if algo >= self.count:
            raise LoadError(f"no cuBLASLt algorithm {algo} in plan {plan}")
        return [100 + algo, 20 + algo, algo + 1, 0, 0, 0, 16, 0, 2][:count]


class FakeBench:
    """Counts the autotuning's device-protocol runs; algo3 is always the fastest."""

    def __init__(self, problem) -> None:
        self.problem = problem
        self.device_runs = 0

    def warm_up(self, runners, calls=3):
        pass

    def heat_up(self, runners, seconds=3.0):
        return seconds

    def device(self, runners, **_kwargs):
        from engine.stats import summarize
        from engine.timing.protocols import ProtocolResult

        self.device_runs += 1
        times = {r.name: [1e-4 if r.name == "algo3" else 2e-4] * 20 for r in runners}
        return ProtocolResult("device", {n: summarize(v) for n, v in times.items()})


@pytest.fixture
def no_gpu_runners(monkeypatch):
    """Baseline runners without GPU workspaces."""
    from engine.timing import baselines
    from engine.timing.protocols import Runner

    def fake_lt(shim, plan, algo, layout, kind, name):
        return Runner(name, kind, layout, lambda ops, stream: 0, {"plan": plan, "algo": algo})

    def fake_cublas(shim, problem, layout):
        return Runner(f"cublas_{layout.value}", "cublas", layout, lambda ops, stream: 0)

    monkeypatch.setattr(baselines, "cublaslt_runner", fake_lt)
    monkeypatch.setattr(baselines, "cublas_runner", fake_cublas)


def test_baselines_are_autotuned_once_per_shape_across_steps(no_gpu_runners, tmp_path):
    """Each GPU step is a new process with a new bench: only the first one of a shape times
    cuBLASLt's algorithms; later ones read the choice from the file."""
    from engine.problem import Problem
    from engine.timing.baselines import baseline_runners

    cache = tmp_path / "baselines" / "cublaslt_autotune_env.json"
    problem = Problem.parse("4096x4096x4096", "nn")
    first = FakeBench(problem)
    _, reports = baseline_runners(first, FakeShim(), autotune_cache=cache)
    assert first.device_runs == 2  # nn and tn
    assert {r["cached"] for r in reports.values()} == {False}
    for _step in range(3):
        later = FakeBench(problem)
        again, reports = baseline_runners(later, FakeShim(), autotune_cache=cache)
        assert later.device_runs == 0
        assert {r["cached"] for r in reports.values()} == {True}
        chosen = {r.name: r.info["algo"] for r in again if r.kind == "cublaslt_autotune"}
        assert chosen == {"cublaslt_autotune_nn": 3, "cublaslt_autotune_tn": 3}
    other = FakeBench(Problem.parse("8192x1024x4096", "nn"))
    baseline_runners(other, FakeShim(), autotune_cache=cache)
    assert other.device_runs == 2  # another shape is tuned once too
    assert set(json.loads(cache.read_text())) == {
        "4096x4096x4096_nn",
        "4096x4096x4096_tn",
        "8192x1024x4096_nn",
        "8192x1024x4096_tn",
    }


def test_a_torn_autotune_cache_is_tuned_again_not_fatal(no_gpu_runners, tmp_path):
    from engine.problem import Problem
    from engine.timing.baselines import autotune_cached, baseline_runners

    cache = tmp_path / "cublaslt_autotune_env.json"
    cache.write_text('{"4096x4096x4096_nn": {"al')  # a writer killed half-way (old code)
    problem = Problem.parse("4096x4096x4096", "nn")
    assert not autotune_cached(cache, problem)
    bench = FakeBench(problem)
    baseline_runners(bench, FakeShim(), autotune_cache=cache)
    assert bench.device_runs == 2
    assert autotune_cached(cache, problem)


def test_storing_a_choice_keeps_what_another_process_stored_meanwhile(tmp_path):
    from engine.timing.baselines import read_autotune_cache, store_autotune

    cache = tmp_path / "baselines" / "cublaslt_autotune_env.json"
    store_autotune(cache, "1024x1024x1024_nn", {"algo": 0})
    store_autotune(cache, "2048x2048x2048_nn", {"algo": 2})
    assert read_autotune_cache(cache) == {
        "1024x1024x1024_nn": {"algo": 0},
        "2048x2048x2048_nn": {"algo": 2},
    }
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]  # no temporary left over


def test_a_measurement_session_sets_up_cached_baselines_before_its_run(monkeypatch, tmp_path):
    """Cached: the baseline runners are built in the set-up (which overlaps verification).
    Not cached: the autotuning (a timing) waits for run(), after the verdicts."""
    from engine.config import EngineConfig
    from engine.problem import Problem
    from engine.timing import baselines, measure
    from engine.timing.phases import Phases

    built: list[str] = []
    monkeypatch.setattr(measure, "collect", lambda **_: type("Env", (), {"key": "env"})())
    monkeypatch.setattr(measure, "Bench", lambda problem, seed, **_: FakeBench(problem))
    monkeypatch.setattr(
        baselines,
        "baseline_runners",
        lambda bench, shim, autotune_cache=None: (built.append("baselines") or [], {}),
    )
    shim = type("Shim", (), {"cublaslt_version": 1})()
    config = EngineConfig(cache_dir=tmp_path)
    problem = Problem.parse("4096x4096x4096", "nn")
    session = measure.Session(problem, config=config, shim=shim, phases=Phases())
    assert built == []  # nothing cached: left for run()
    cache = baselines.autotune_cache_path(config, "env")
    for layout in ("nn", "tn"):
        baselines.store_autotune(cache, f"4096x4096x4096_{layout}", {"algo": 0})
    session = measure.Session(problem, config=config, shim=shim, phases=Phases())
    assert built == ["baselines"]
    session.prepare_baselines()
    assert built == ["baselines"]  # once per session


def test_the_autotune_report_names_what_the_pick_and_the_heuristic_run(no_gpu_runners, tmp_path):
    """Timed or read from the cache, the report says which cuBLASLt kernel was chosen (algo3,
    the fastest) and which the heuristic would have run (algo 0)."""
    from engine.problem import Problem
    from engine.timing.baselines import baseline_runners

    cache = tmp_path / "cublaslt_autotune_env.json"
    problem = Problem.parse("4096x4096x4096", "nn")
    for cached in (False, True):
        _, reports = baseline_runners(FakeBench(problem), FakeShim(), autotune_cache=cache)
        report = reports["cublaslt_autotune_nn"]
        assert report["cached"] is cached
        assert report["kernel"]["algo_id"] == 103
        assert report["kernel"]["splitk"] == 4
        assert report["heuristic_kernel"]["algo_id"] == 100
        assert report["kernel"]["raw"]["tile_id"] == 23
    assert "kernel" not in json.loads(cache.read_text())["4096x4096x4096_nn"]  # named afresh


def test_a_shim_that_cannot_say_leaves_the_kernel_unnamed():
    from engine.timing.baselines import lt_kernel

    assert lt_kernel(FakeShim(count=2), plan=1, algo=5) is None
    assert lt_kernel(FakeShim(count=2), plan=1, algo=1)["algo_id"] == 101


# -- the shim's source: the bundle's description of a cuBLASLt problem, spliced in -------------
def test_the_shim_is_built_from_baselines_cu_with_the_bundles_cublaslt_plan_header_inlined():
    from engine.timing.baselines import LT_PLAN_HEADER, SHIM_SOURCE, shim_source

    source = shim_source()
    assert LT_PLAN_HEADER.read_text().rstrip("\n") in source
    assert f'#include "{LT_PLAN_HEADER.name}"' not in source
    # the rest of baselines.cu is kept as it is
    before, _, after = SHIM_SOURCE.read_text().partition(f'#include "{LT_PLAN_HEADER.name}"')
    assert source.startswith(before)
    assert source.endswith(after)


def test_a_baselines_cu_that_does_not_include_the_header_is_refused(tmp_path, monkeypatch):
    from engine.timing import baselines

    copy = tmp_path / "baselines.cu"
    copy.write_text(baselines.SHIM_SOURCE.read_text().replace('#include "cublaslt_plan.h"', ""))
    monkeypatch.setattr(baselines, "SHIM_SOURCE", copy)
    with pytest.raises(ValueError, match=r"cublaslt_plan\.h"):
        baselines.shim_source()


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_baseline_shim_compiles_and_exports_its_entry_points(engine_config):
    import subprocess

    from engine.compilation.toolkit import CublasNotFound
    from engine.timing.baselines import build_shim

    try:
        built = build_shim(engine_config)
    except CublasNotFound as exc:
        pytest.skip(str(exc))
    assert built.ok, built.log[-4000:]
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(built.library)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for name in ("baselines_init", "cublas_hgemm", "cublaslt_plan", "cublaslt_hgemm"):
        assert name in symbols


def test_choices_timed_after_a_reading_flush_keep_a_cache_file_of_their_own(tmp_path):
    from engine.config import EngineConfig
    from engine.timing.baselines import autotune_cache_path

    config = EngineConfig(cache_dir=tmp_path)
    default = autotune_cache_path(config, "env")
    assert default == autotune_cache_path(config, "env", "write")
    assert default.name == "cublaslt_autotune_env.json"  # where every earlier choice lives
    assert (
        autotune_cache_path(config, "env", "read").name == "cublaslt_autotune_env_read_flush.json"
    )
