"""bench/verify_profile.py and bench/deep_splitk.py without a GPU: what a profile reports from a
batch's verdicts, and which configs the deep split-K and raster runs take (GPU runs of the first
two are in bench/results/2026-12-04-h200-run12/)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import ModuleType

import pytest

from engine.codegen.sm80 import Sm80Config
from engine.codegen.sm90 import Sm90Config
from engine.config import HEAT_WHILE_VERIFYING_VARIABLE
from engine.problem import Problem
from engine.verify.verifier import VerifyResult
from tests import bench_scripts


@pytest.fixture(scope="module")
def vp() -> ModuleType:
    return bench_scripts.load("verify_profile")


def verdict(ok: bool, session: float, checks: list[float], **kw) -> VerifyResult:
    return VerifyResult(
        ok,
        "ok" if ok else "input_modified",
        "all checks passed" if ok else "changed A or B",
        checks=[{"name": f"trial {i}", "detail": {"seconds": s}} for i, s in enumerate(checks)],
        seconds=session + sum(checks),
        startup_s={"start": 0.01, "cuda_init": 0.2},
        phases_s={"session": session, "checks": sum(checks), "session_buffers": session / 2},
        busy_stream="gate",
        **kw,
    )


def test_a_profile_reports_medians_and_names_each_failed_kernel(vp):
    verdicts = [verdict(True, 0.1, [0.3, 0.01]), verdict(True, 0.3, [0.5, 0.03])]
    verdicts.append(verdict(False, 0.2, [0.4]))
    out = vp.verdict_profile(["a", "b", "c"], verdicts)
    assert out["ok"] == 2
    assert out["session_s"] == 0.2
    assert out["session_buffers_s"] == 0.1
    assert out["session_library_s"] is None  # not reported by these verdicts
    assert out["check_s"] == {"trial 0": 0.4, "trial 1": 0.02}
    assert out["busy_stream"] == ["gate"]
    assert out["failures"] == [
        {"kernel": "c", "reason": "input_modified", "message": "changed A or B"}
    ]


def test_the_deep_split_k_run_takes_the_deep_configs_of_both_families():
    deep = bench_scripts.load("deep_splitk").deep_configs()
    sm80 = [c for c in deep if isinstance(c, Sm80Config)]
    sm90 = [c for c in deep if isinstance(c, Sm90Config)]
    assert len(sm80) == 9
    assert {c.splits for c in sm80} == {8, 16, 32}
    assert len(sm90) == 6 + 2  # the transposed problem's 32x128, 8 and 16 splits
    assert sum(c.swapped for c in sm90) == 2
    assert {(c.scheduler, c.decomposition) for c in sm90} == {("streamk", "splitk")}
    assert {c.splits for c in sm90} == {4, 8, 16}
    assert all(c.is_valid(Problem(128, 128, 12288), "sm_90") for c in sm80)
    assert all(c.is_valid(Problem(128, 128, 12288), "sm_90a") for c in sm90)


def test_the_reduction_run_sets_each_fused_reduction_beside_its_two_kernel_twin():
    script = bench_scripts.load("deep_splitk")
    configs = script.reduction_configs()
    by_reduction = {
        r: {c.name.removesuffix(f"_{r}") for c in configs if c.reduction == r}
        for r in ("kernel", "pdl", "cluster")
    }
    assert by_reduction["pdl"] == by_reduction["kernel"]  # splits 2, 4, 8, 16, 32
    assert by_reduction["cluster"] < by_reduction["kernel"]  # at most 16 CTAs in a cluster
    assert len(configs) == 15 + 15 + 12
    for shape in script.CONFIG_SETS["reduction"][1].split(","):
        problem = Problem.parse(shape)
        fitting = [c for c in configs if c.splits <= problem.k // c.tile_k]
        assert len(fitting) >= 36  # 32 splits of 64 need K ≥ 2048
        assert script.valid_for(problem, configs) == fitting


def test_the_split_n_run_sets_each_split_n_tile_beside_the_winners_and_its_m_split_twin():
    script = bench_scripts.load("deep_splitk")
    configs = script.split_n_configs()
    tiles = {(c.tile_m, c.tile_n, c.schedule, c.warpgroups) for c in configs}
    assert tiles == {
        (192, 192, "coop", "n"),
        (128, 320, "coop", "n"),
        (128, 256, "coop", "n"),
        (128, 256, "coop", "m"),
        (128, 128, "pingpong", "m"),
    }
    assert len(configs) == 5 * 3  # every cluster shape
    for shape in script.CONFIG_SETS["splitn"][1].split(","):
        assert script.valid_for(Problem.parse(shape), configs) == configs


def test_the_transposed_run_sets_the_short_tiles_beside_the_sm80_kernels_that_won_there():
    script = bench_scripts.load("deep_splitk")
    configs = script.transposed_configs()
    assert {c.tile_m for c in configs if isinstance(c, Sm90Config)} == {16, 32, 48}
    assert all(c.swapped for c in configs if isinstance(c, Sm90Config))
    assert sorted(c.name for c in configs if isinstance(c, Sm80Config)) == sorted(
        script.TRANSPOSED_YARDSTICKS
    )
    for shape in script.CONFIG_SETS["transposed"][1].split(","):
        assert len(script.valid_for(Problem.parse(shape), configs)) >= 11


def test_the_epilogue_run_sets_each_wide_epilogue_tile_beside_the_builders():
    script = bench_scripts.load("deep_splitk")
    configs = script.epilogue_configs()
    wide = [c for c in configs if c.epilogue_n]
    assert len(wide) == 6
    assert {c.name.replace("epitma128", "epitma") for c in wide} == {
        c.name for c in configs if not c.epilogue_n
    }
    for shape in script.CONFIG_SETS["epilogue"][1].split(","):
        assert script.valid_for(Problem.parse(shape), configs) == configs


def test_the_deep_split_k_run_verifies_both_families_at_a_long_k_shape():
    script = bench_scripts.load("deep_splitk")
    deep = script.deep_configs()
    assert script.valid_for(Problem(128, 128, 12288), deep) == deep


def test_a_variant_names_variables_that_reach_the_verifiers(vp):
    assert vp.parse_variant("sleep:ENGINE_VERIFY_BUSY_STREAM=sleep") == (
        "sleep",
        {"ENGINE_VERIFY_BUSY_STREAM": "sleep"},
    )
    assert vp.parse_variant("two:CUDA_MODULE_LOADING=EAGER,ENGINE_X=1")[1] == {
        "CUDA_MODULE_LOADING": "EAGER",
        "ENGINE_X": "1",
    }
    for bad in ("no-colon", "name:", ":A=1", "name:NOEQUALS"):
        with pytest.raises(ValueError, match="expected NAME:VAR=VALUE"):
            vp.parse_variant(bad)
    with pytest.raises(ValueError, match="would not reach a verifier"):
        vp.parse_variant("alloc:PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_a_variant_environment_is_restored_after_its_batches(vp, monkeypatch):
    monkeypatch.setenv("ENGINE_KEEP", "before")
    monkeypatch.delenv("ENGINE_NEW", raising=False)
    with vp.environment({"ENGINE_KEEP": "during", "ENGINE_NEW": "1"}):
        assert os.environ["ENGINE_KEEP"] == "during"
        assert os.environ["ENGINE_NEW"] == "1"
    assert os.environ["ENGINE_KEEP"] == "before"
    assert "ENGINE_NEW" not in os.environ


def test_the_trapping_kernel_is_as_expected_only_when_it_fails_at_runtime(vp):
    trapped = VerifyResult(False, "runtime_error", "trap")
    assert vp.as_expected(vp.FAULT, trapped)
    assert not vp.as_expected("hgemm_sm90_honest", trapped)
    assert vp.as_expected("hgemm_sm90_honest", VerifyResult(True, "ok", ""))
    assert not vp.as_expected(vp.FAULT, VerifyResult(True, "ok", ""))


def test_the_raster_run_sets_each_swizzle_beside_the_schedulers_defaults_on_large_shapes():
    script = bench_scripts.load("deep_splitk")
    configs = script.raster_configs()
    orders = {(c.raster, c.swizzle) for c in configs}
    assert ("heuristic", 1) in orders  # what the campaign's large-shape winners use
    assert {(r, s) for r in ("m", "n") for s in (2, 4, 8)} <= orders
    assert {(c.cluster_m, c.cluster_n) for c in configs} == {(1, 1), (2, 1), (1, 2)}
    for shape in script.CONFIG_SETS["raster"][1].split(","):
        problem = Problem.parse(shape)
        assert problem.m * problem.n * problem.k >= 2**36  # the large size class
        assert script.valid_for(problem, configs) == configs


def test_a_heat_variant_gets_one_ready_session_per_shape(vp, monkeypatch):
    from engine.timing import measure

    made = []

    class FakeSession:
        def __init__(self, problem):
            made.append(problem.key)
            self.ready = False

        def prepare_baselines(self):
            self.ready = True

    monkeypatch.setattr(measure, "Session", FakeSession)
    sessions: dict = {}
    square, other = Problem(4096, 4096, 4096), Problem(8192, 1024, 4096)
    monkeypatch.delenv(HEAT_WHILE_VERIFYING_VARIABLE, raising=False)
    assert vp.heat_session(square, sessions) is None
    monkeypatch.setenv(HEAT_WHILE_VERIFYING_VARIABLE, "on")
    first = vp.heat_session(square, sessions)
    assert first.ready
    assert vp.heat_session(square, sessions) is first
    assert vp.heat_session(other, sessions) is not first
    assert made == [square.key, other.key]


def test_the_reduction_run_writes_each_shapes_speedups_from_the_gpu_path(monkeypatch, tmp_path):
    """The script's whole flow with stand-ins for the compiler, the verifiers and the finals
    child: the device time is too scarce to find a slip in it there."""
    from types import SimpleNamespace

    script = bench_scripts.load("deep_splitk")
    configs = script.reduction_configs()
    fused = {c.name for c in configs if c.reduction != "kernel"}
    monkeypatch.setattr(script, "search_summary", lambda db: {"shapes": []})
    monkeypatch.setattr(script.cuda_driver, "local_arch", lambda: "sm_90")
    monkeypatch.setattr(
        script,
        "compile_configs",
        lambda cs, **_: [SimpleNamespace(ok=True, library=Path(f"/k/{c.name}.so")) for c in cs],
    )

    class Server:
        def close(self):
            pass

    monkeypatch.setattr(
        script, "new_fork_server", lambda start: (Server(), SimpleNamespace(cleanup=lambda: None))
    )
    verified: list[tuple[str, int]] = []

    class Batch:
        def __init__(self, libraries, problem, *, jobs, fork_server):
            verified.append((problem.key, jobs))
            self.libraries = libraries

        def results(self):
            return [VerifyResult(True, "ok", "") for _ in self.libraries]

    monkeypatch.setattr(script, "Verifications", Batch)

    def remeasure(jobs, *, protocols, device_seconds):
        assert protocols == ("device",)
        assert device_seconds == 1.0
        records = []
        for _problem, libraries in jobs:
            # the fused ones 10 % faster than cuBLASLt, the two-kernel ones 10 % slower
            speedups = {
                name: {"cublaslt_autotune": 1.1 if name in fused else 0.9} for name in libraries
            }
            records.append({"protocols": {"device": {"speedups": speedups, "seconds": {}}}})
        return records

    monkeypatch.setattr(script, "remeasure_batch", remeasure)
    out = tmp_path / "reduction.json"
    shapes = "128x128x16384,4096x64x1024"
    args = ["--db", "x.sqlite", "--set", "reduction", "--shapes", shapes, "--verify-jobs", "16"]
    assert script.main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["set"] == "reduction"
    assert [s["problem"] for s in report["shapes"]] == ["128x128x16384_nn", "4096x64x1024_nn"]
    assert verified == [("128x128x16384_nn", 16), ("4096x64x1024_nn", 16)]
    for shape in report["shapes"]:
        assert shape["best"] in fused
        assert shape["best_speedup"] == 1.1
    # 32 splits of 64 do not fit K = 1024: those configs are not verified there
    assert len(report["verdicts"]["4096x64x1024_nn"]) == len(configs) - 6


def test_a_profile_heats_while_its_batch_verifies_and_reports_for_how_long(vp, monkeypatch):
    from types import SimpleNamespace

    from engine.verify import verifier as verify_module

    released = []

    def fake_verify(library, problem, **_kwargs):
        while not released:  # the verifiers finish only once the heat has started
            time.sleep(0.001)
        return VerifyResult(True, "ok", "", seconds=0.01)

    class Heat:
        def heat_while(self, busy):
            started = time.monotonic()
            released.append(True)
            while busy():
                time.sleep(0.001)
            return time.monotonic() - started + 0.5

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    monkeypatch.delenv("ENGINE_VERIFY_WARM", raising=False)
    kernels = {"a": Path("/k/a.so"), "b": Path("/k/b.so")}
    sampler = SimpleNamespace(samples=[])
    run = vp.profile(Problem(256, 256, 256), kernels, 2, False, sampler, Heat())
    assert run["heat_while_verifying_s"] >= 0.5
    assert run["as_expected"] == 2
    quiet = vp.profile(Problem(256, 256, 256), kernels, 2, False, sampler)
    assert quiet["heat_while_verifying_s"] == 0.0
