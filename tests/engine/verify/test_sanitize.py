"""The compute-sanitizer gate: summary parsing, failure reasons, the harness build (nvcc), and
on a GPU the reference kernel passing and an out-of-bounds cheat failing memcheck."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
    monkeypatch.setattr(sanitize, "sanitize", lambda library, problem, **_: seen.append(problem))
    optimize.sanitize_library(Path("/x/k.so"), layout=Layout.TN)
    assert seen == [Problem(264, 272, 1032, Layout.TN)]
