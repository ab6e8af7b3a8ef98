"""The compute-sanitizer gate: where each kernel is sanitized, summary parsing, failure reasons,
a refused problem, a missing tool, the verdict key, the harness build (nvcc), and on a GPU the
reference kernel passing, an out-of-bounds cheat failing memcheck and an evenk Triton kernel
passing at the problems it accepts."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from engine.codegen import Sm80Config, Sm90Config, TritonConfig
from engine.compilation.source_kernel import SourceKernel
from engine.problem import Layout, Problem
from engine.verify import harness_kernels, sanitize

CLEAN = "========= COMPUTE-SANITIZER\nok\n========= ERROR SUMMARY: 0 errors\n"
DIRTY = (
    "========= Invalid __global__ write of size 2 bytes\n"
    "=========     at hgemm+0x90\n========= ERROR SUMMARY: 3 errors\n"
)
RACE = "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n"


def test_it_reads_the_error_count_of_each_tool():
    assert sanitize.parse_errors("memcheck", CLEAN) == 0
    assert sanitize.parse_errors("memcheck", DIRTY) == 3
    assert sanitize.parse_errors("racecheck", RACE + "========= ERROR SUMMARY: 0 errors") == 2
    assert sanitize.parse_errors("initcheck", "no summary at all") is None


def report(**overrides) -> sanitize.ToolReport:
    fields = {"tool": "memcheck", "ok": False, "errors": 0, "exit_code": 0, "seconds": 1.0}
    return sanitize.ToolReport(**{**fields, **overrides})


def test_each_failure_has_its_own_reason():
    assert sanitize.failure_of(report(errors=3, exit_code=97))[0] == "memcheck"
    assert sanitize.failure_of(report(tool="racecheck", errors=1))[0] == "racecheck"
    assert sanitize.failure_of(report(timed_out=True, errors=None))[0] == "timeout"
    assert sanitize.failure_of(report(exit_code=3))[0] == "call_failed"
    assert sanitize.failure_of(report(errors=None, exit_code=2))[0] == "setup"
    assert sanitize.failure_of(report(errors=None, killed_for="memory"))[0] == "memory"


def test_the_sanitizer_child_gets_the_candidate_environment(tmp_path, monkeypatch):
    """A stand-in compute-sanitizer that prints its environment and a clean summary."""
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    monkeypatch.setenv("REDIS_URL", "redis://:password@redis:6379/0")
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\nenv\necho '========= ERROR SUMMARY: 0 errors'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake))
    harness, library = tmp_path / "harness", tmp_path / "lib.so"
    tool = sanitize.run_tool("memcheck", harness, library, Problem(8, 8, 8))
    assert tool.ok, tool.output_tail
    assert "SECRET_KEY" not in tool.output_tail
    assert "REDIS_URL" not in tool.output_tail
    assert "HOME=" in tool.output_tail
    assert tool.killed_for is None
    assert "killed_for" in tool.to_dict()


def test_it_rejects_unknown_tools(tmp_path):
    with pytest.raises(ValueError, match="unknown sanitizer tools"):
        sanitize.sanitize(tmp_path / "lib.so", tools=("leakcheck",))


@pytest.mark.nvcc
def test_the_harness_builds_once_with_nvcc(tmp_path, monkeypatch):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH")
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path))
    first = sanitize.build_harness()
    assert first.is_file()
    assert first.stat().st_mode & 0o111
    assert sanitize.build_harness() == first  # cached


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.nvcc
def test_the_reference_kernel_passes_every_tool_and_an_oob_write_fails_memcheck():
    if not gpu_available():
        pytest.skip("needs a CUDA GPU")
    problem = Problem(264, 272, 1032, Layout.NN)
    (reference,) = harness_kernels.build([harness_kernels.REFERENCE], Layout.NN)
    verdict = sanitize.sanitize(reference.library, problem)
    assert verdict.ok, verdict.to_dict()
    out_of_bounds = harness_kernels.BAD_KERNELS / "out_of_bounds_write.cu"
    (oob,) = harness_kernels.build([out_of_bounds], Layout.NN)
    verdict = sanitize.sanitize(oob.library, problem, tools=("memcheck",))
    assert not verdict.ok
    assert verdict.reason == "memcheck", verdict.to_dict()


def test_a_racecheck_run_with_only_its_hazard_summary_counts_as_clean():
    # what compute-sanitizer 13.0 printed on the H200 for the reference kernel (2026-12-03)
    output = (
        "========= COMPUTE-SANITIZER\nok\n"
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    )
    assert sanitize.parse_errors("racecheck", output) == 0
    assert sanitize.parse_errors("memcheck", output) is None


def test_a_campaigns_top_kernels_are_sanitized_in_its_own_layout(monkeypatch):
    from engine.commands import optimize_command as optimize

    seen = []
    monkeypatch.setattr(sanitize, "sanitize", lambda library, problems, **_: seen.extend(problems))
    target = Problem(512, 512, 512, Layout.TN)
    optimize.sanitize_library(Path("/x/k.so"), Sm90Config(layout=Layout.TN), target)
    assert seen == [Problem(264, 280, 1032, Layout.TN), target]


# ---- where a kernel is sanitized ----------------------------------------------------------

TARGET = Problem(1024, 1024, 1024, Layout.NN)


def test_an_evenk_triton_config_is_sanitized_where_k_is_whole_tiles_with_m_and_n_residues():
    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    assert not config.is_valid(sanitize.DEFAULT_PROBLEM)  # where it once failed as call_failed
    small, target = sanitize.sanitize_problems(config, TARGET)
    assert small == Problem(264, 280, 1024, Layout.NN)
    assert (small.m % config.tile_m, small.n % config.tile_n, small.k % config.tile_k) == (8, 24, 0)
    assert target == Problem(512, 512, 1024, Layout.NN)  # 2^30 multiply-adds, shrunk to 2^28
    assert all(config.is_valid(p) for p in (small, target))


def test_a_cutlass_config_is_sanitized_with_a_residue_in_every_dimension():
    config = Sm90Config(layout=Layout.NN)
    small, _target = sanitize.sanitize_problems(config, TARGET)
    assert small == sanitize.DEFAULT_PROBLEM == Problem(264, 280, 1032, Layout.NN)
    assert sanitize.residues(small, sanitize.tiles_of(config)) == 3
    assert sanitize.residues(sanitize.DEFAULT_PROBLEM, (192, 320, 48)) == 3  # the odd tiles too


def test_a_split_k_config_gets_a_k_with_a_tile_for_every_split():
    config = TritonConfig(layout=Layout.NN, tile_k=256, splits=16)
    small = sanitize.small_problem(config, Layout.NN)
    assert small == Problem(264, 280, 4104, Layout.NN)  # 17 K tiles, the last one partial
    assert config.is_valid(small)


def test_a_small_target_is_sanitized_as_it_is():
    config = Sm80Config(layout=Layout.TN)
    target = Problem(100, 136, 2056, Layout.TN)
    assert sanitize.sanitize_problems(config, target)[-1] == target


def test_a_large_target_is_shrunk_in_whole_tiles_keeping_its_residues():
    config = Sm90Config(layout=Layout.NN, tile_m=128, tile_n=256, tile_k=64)
    target = Problem(8200, 4104, 16392, Layout.NN)
    shrunk = sanitize.shrunk_target(config, target)
    assert shrunk is not None
    assert shrunk.m * shrunk.n * shrunk.k <= sanitize.MAX_TARGET_MACS
    assert (shrunk.m % 128, shrunk.n % 256, shrunk.k % 64) == (8200 % 128, 4104 % 256, 16392 % 64)
    assert config.is_valid(shrunk)


def test_a_model_written_kernel_is_sanitized_at_the_default_problem_and_its_target():
    kernel = SourceKernel("// model-written", Layout.NN)
    target = Problem(128, 256, 512, Layout.NN)
    assert sanitize.sanitize_problems(kernel, target) == (sanitize.DEFAULT_PROBLEM, target)
    assert sanitize.sanitize_problems(None, target) == (sanitize.DEFAULT_PROBLEM, target)


def test_the_verdict_key_names_the_problems_and_the_harness(tmp_path, monkeypatch):
    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    key = sanitize.verdict_key(config, TARGET)
    assert key.startswith("264x280x1024_nn+512x512x1024_nn@")
    assert key != sanitize.verdict_key(config, Problem(256, 256, 256, Layout.NN))
    harness = tmp_path / "sanitize_main.cu"
    harness.write_text("// another harness")
    monkeypatch.setattr(sanitize, "HARNESS_FILES", (harness,))
    assert sanitize.verdict_key(config, TARGET) != key


# ---- verdicts: refused problems, a missing tool -------------------------------------------


def fake_sanitizer(tmp_path: Path, body: str) -> Path:
    """A stand-in compute-sanitizer (Python): ``body`` sees the problem the harness was given
    (``m``, ``n``, ``k``, the end of its argv) and ``summary(errors, status)`` prints the
    tool's summary and exits."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "m, n, k = (int(x) for x in sys.argv[-4:-1])\n"
        "def summary(errors=0, status=0):\n"
        "    print(f'========= ERROR SUMMARY: {errors} errors')\n"
        "    sys.exit(status)\n" + body
    )
    fake.chmod(0o755)
    return fake


@pytest.fixture
def harness_stub(tmp_path, monkeypatch):
    harness = tmp_path / "sanitize_main"
    monkeypatch.setattr(sanitize, "build_harness", lambda config=None: harness)
    return harness


EVEN_K_ONLY = (
    "if k % 64:\n"
    "    print('gemmforge_hgemm refused: returned 1 before launching')\n"
    f"    summary(0, {sanitize.REFUSED_EXIT})\n"
    "summary(0, 0)\n"
)


def test_a_problem_refused_before_launch_is_neither_a_fault_nor_a_rejection(
    tmp_path, monkeypatch, harness_stub
):
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake_sanitizer(tmp_path, EVEN_K_ONLY)))
    refused, accepted = sanitize.DEFAULT_PROBLEM, Problem(264, 280, 1024, Layout.NN)
    verdict = sanitize.sanitize(tmp_path / "lib.so", (refused, accepted))
    assert (verdict.ok, verdict.reason) == (True, "ok"), verdict.to_dict()
    assert verdict.refused == (refused.key,)
    # the refused problem ran one tool, the accepted one all three
    assert [(r.problem, r.tool) for r in verdict.reports] == [
        (refused.key, "memcheck"),
        *((accepted.key, tool) for tool in sanitize.TOOLS),
    ]
    assert verdict.to_dict()["reports"][0]["refused"] is True


def test_a_kernel_that_refuses_every_problem_has_not_been_sanitized(
    tmp_path, monkeypatch, harness_stub
):
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake_sanitizer(tmp_path, EVEN_K_ONLY)))
    verdict = sanitize.sanitize(tmp_path / "lib.so", sanitize.DEFAULT_PROBLEM)
    assert (verdict.ok, verdict.reason) == (False, "refused")
    assert "nothing was sanitized" in verdict.message


def test_a_call_that_fails_after_launching_is_still_a_rejection(
    tmp_path, monkeypatch, harness_stub
):
    body = "print('gemmforge_hgemm returned 700 on call 0')\nsummary(0, 3)\n"
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake_sanitizer(tmp_path, body)))
    verdict = sanitize.sanitize(tmp_path / "lib.so", sanitize.DEFAULT_PROBLEM)
    assert (verdict.ok, verdict.reason) == (False, "call_failed")
    assert sanitize.DEFAULT_PROBLEM.key in verdict.message


def test_a_finding_at_a_later_problem_rejects_the_kernel(tmp_path, monkeypatch, harness_stub):
    body = f"summary(2, {sanitize.ERROR_EXIT}) if m == 512 else summary(0, 0)\n"
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake_sanitizer(tmp_path, body)))
    problems = (sanitize.DEFAULT_PROBLEM, Problem(512, 512, 1024, Layout.NN))
    verdict = sanitize.sanitize(tmp_path / "lib.so", problems)
    assert (verdict.ok, verdict.reason) == (False, "memcheck")
    assert "512x512x1024_nn" in verdict.message


def test_a_missing_compute_sanitizer_is_a_verdict_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "compute_sanitizer_path", lambda config=None: None)
    verdict = sanitize.sanitize(tmp_path / "lib.so", sanitize.DEFAULT_PROBLEM)
    assert (verdict.ok, verdict.reason) == (False, "sanitizer_missing")
    assert verdict.reason in sanitize.SETUP_REASONS
    assert "ENGINE_COMPUTE_SANITIZER" in verdict.message


def test_a_harness_that_does_not_build_is_a_verdict_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_COMPUTE_SANITIZER", str(fake_sanitizer(tmp_path, "summary()\n")))

    def broken(config=None):
        raise sanitize.SanitizeSetupError("building the sanitizer harness failed: nvcc died")

    monkeypatch.setattr(sanitize, "build_harness", broken)
    verdict = sanitize.sanitize(tmp_path / "lib.so", sanitize.DEFAULT_PROBLEM)
    assert (verdict.ok, verdict.reason) == (False, "harness_build")
    assert verdict.reason in sanitize.SETUP_REASONS


SANITIZE_KERNELS = Path(__file__).resolve().parents[2] / "fixtures" / "sanitize_kernels"


@pytest.mark.nvcc
def test_the_refusing_and_the_failing_fixtures_build():
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH")
    paths = sorted(SANITIZE_KERNELS.glob("*.cu"))
    assert [p.stem for p in paths] == ["fails_after_launch", "refuses_ragged_k"]
    for built in harness_kernels.build(paths, Layout.NN):
        assert built.ok, built.log[-2000:]


@pytest.mark.gpu
@pytest.mark.nvcc
def test_the_harness_tells_a_refusal_before_launch_from_a_failure_after_it():
    """Both libraries' first call returns an error with nothing pending on the device; only
    the one that launched nothing refused (the harness counts launches under stream capture)."""
    if not gpu_available():
        pytest.skip("needs a CUDA GPU")
    refuses, fails = (
        harness_kernels.build_one(SANITIZE_KERNELS / f"{name}.cu", Layout.NN)
        for name in ("refuses_ragged_k", "fails_after_launch")
    )
    assert refuses.ok, refuses.log[-2000:]
    assert fails.ok, fails.log[-2000:]
    accepted = Problem(264, 280, 1024, Layout.NN)
    verdict = sanitize.sanitize(refuses.library, (sanitize.DEFAULT_PROBLEM, accepted))
    assert verdict.ok, verdict.to_dict()
    assert verdict.refused == (sanitize.DEFAULT_PROBLEM.key,)
    assert "before launching" in verdict.reports[0].output_tail
    verdict = sanitize.sanitize(fails.library, accepted, tools=("memcheck",))
    assert (verdict.ok, verdict.reason) == (False, "call_failed"), verdict.to_dict()
    assert "after launching work" in verdict.reports[0].output_tail


@pytest.mark.gpu
@pytest.mark.nvcc
def test_an_evenk_triton_kernel_passes_at_the_problems_it_accepts_and_refuses_the_rest():
    """The issue-40 kernel: Triton without K masks, which refuses K % tile_k != 0 before
    launching. At the default problem (K = 1032) it refuses; at its own problems every tool
    passes."""
    if not gpu_available():
        pytest.skip("needs a CUDA GPU")
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    config = TritonConfig(layout=Layout.NN, tile_m=64, tile_n=64, tile_k=64, even_k=True)
    target = Problem(256, 272, 1024, Layout.NN)
    [built] = compile_configs([config], target_arch=cuda_driver.local_arch())
    assert built.ok, built.error
    problems = sanitize.sanitize_problems(config, target)
    verdict = sanitize.sanitize(built.library, (sanitize.DEFAULT_PROBLEM, *problems))
    assert verdict.ok, verdict.to_dict()
    assert verdict.refused == (sanitize.DEFAULT_PROBLEM.key,)
    assert [r.problem for r in verdict.reports if r.tool == "racecheck"] == [
        p.key for p in problems
    ]
