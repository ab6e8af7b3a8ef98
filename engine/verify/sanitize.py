"""compute-sanitizer as a gate: memcheck, racecheck and initcheck on a candidate library.

The verifier catches wrong answers; the sanitizer catches what can be right by luck — an
out-of-bounds read that lands in mapped memory, a shared-memory race that the current timing
hides, a read of memory nothing wrote. A kernel must pass all three tools before it can become a
shape's best or enter a bundle.

Each tool runs a small host harness (engine/cuda/sanitize_main.cu, built once per nvcc version
into the cache) that loads the library and calls it twice on one problem, so only the candidate's
own kernels are instrumented. Findings, a failed call and timeouts are data in the result.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from engine import abi
from engine.compilation.toolkit import compute_sanitizer_path, nvcc_version
from engine.config import COMPUTE_SANITIZER_VARIABLE, EngineConfig
from engine.config import load as load_config
from engine.isolation import processes, sandbox
from engine.problem import Layout, Problem

TOOLS = ("memcheck", "racecheck", "initcheck")
HARNESS_SOURCE = abi.CUDA_DIR / "sanitize_main.cu"
# residues in every dimension, K long enough for split-K and stream-K paths, small enough that
# racecheck (the slowest tool) finishes in seconds
DEFAULT_PROBLEM = Problem(264, 272, 1032, Layout.NN)
TOOL_TIMEOUT = 300.0
ERROR_EXIT = 97  # compute-sanitizer's exit status when it found errors
_SUMMARY_RE = re.compile(r"ERROR SUMMARY: ([0-9]+) error")
_HAZARD_RE = re.compile(r"RACECHECK SUMMARY: ([0-9]+) hazard")


def sanitize_problem(layout: Layout) -> Problem:
    """DEFAULT_PROBLEM's shape (unaligned to every tile, small enough for the tools) in
    ``layout``."""
    return Problem(DEFAULT_PROBLEM.m, DEFAULT_PROBLEM.n, DEFAULT_PROBLEM.k, layout)


class SanitizeSetupError(RuntimeError):
    """No compute-sanitizer, or the harness does not build: fix the environment."""


@dataclass(frozen=True)
class ToolReport:
    tool: str
    ok: bool
    errors: int | None  # None: the tool printed no summary (crash, timeout, setup failure)
    exit_code: int
    seconds: float
    timed_out: bool = False
    output_tail: str = ""
    killed_for: str | None = None  # processes.ProcessResult.killed_for

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "ok": self.ok,
            "errors": self.errors,
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "output_tail": self.output_tail,
            "killed_for": self.killed_for,
        }


@dataclass(frozen=True)
class SanitizeResult:
    ok: bool
    reason: str  # "ok", or the first failing tool, or "timeout" / "memory" / "call_failed"
    message: str
    problem: str
    reports: tuple[ToolReport, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "problem": self.problem,
            "reports": [r.to_dict() for r in self.reports],
        }


def sanitizer_path(config: EngineConfig | None = None) -> Path:
    """compute-sanitizer (engine.compilation.toolkit finds it); SanitizeSetupError without one."""
    if (path := compute_sanitizer_path(config)) is None:
        raise SanitizeSetupError(
            "compute-sanitizer not found: install the CUDA toolkit or set "
            f"{COMPUTE_SANITIZER_VARIABLE}"
        )
    return path


def harness_command(nvcc: str, output: Path) -> list[str]:
    return [
        nvcc,
        "-O2",
        "-std=c++17",
        "-lineinfo",
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=[sm_90,compute_90]",
        f"-I{abi.CUDA_DIR}",
        os.fspath(HARNESS_SOURCE),
        "-o",
        os.fspath(output),
        "-ldl",
    ]


def build_harness(config: EngineConfig | None = None) -> Path:
    """The harness executable, built once into ``<cache>/sanitize/<key>/``."""
    config = config or load_config()
    digest = hashlib.sha256()
    for path in (HARNESS_SOURCE, abi.CUDA_DIR / "gemmforge_abi.h"):
        digest.update(path.read_bytes())
    digest.update(nvcc_version(config.nvcc).encode())
    entry = config.cache_dir / "sanitize" / digest.hexdigest()[:16]
    binary = entry / "sanitize_main"
    if binary.is_file():
        return binary
    entry.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry / ".lock")):
        if binary.is_file():
            return binary
        partial = entry / "sanitize_main.partial"
        result = processes.run(
            harness_command(config.nvcc, partial), timeout=processes.Timeout.NVCC
        )
        if not result.ok:
            raise SanitizeSetupError(f"building the sanitizer harness failed:\n{result.stderr}")
        partial.rename(binary)
    return binary


def parse_errors(tool: str, output: str) -> int | None:
    """The error count of compute-sanitizer's summary (racecheck: hazards), None if absent."""
    match = _SUMMARY_RE.search(output)
    hazard = _HAZARD_RE.search(output) if tool == "racecheck" else None
    # measured on the H200 (compute-sanitizer of CUDA 13.0): racecheck prints only its RACECHECK
    # SUMMARY line when it finds nothing, no ERROR SUMMARY
    counts = [int(m.group(1)) for m in (match, hazard) if m is not None]
    return max(counts) if counts else None


def run_tool(
    tool: str, harness: Path, library: Path, problem: Problem, *, timeout: float = TOOL_TIMEOUT
) -> ToolReport:
    argv = [
        sanitizer_path(),
        "--tool",
        tool,
        "--error-exitcode",
        str(ERROR_EXIT),
        "--print-limit",
        "20",
        harness,
        Path(library).resolve(),
        str(problem.m),
        str(problem.n),
        str(problem.k),
        problem.layout.value,
    ]
    with tempfile.TemporaryDirectory(prefix="gemmforge-sanitize-") as home:
        env = sandbox.candidate_env(Path(home))
        result = processes.run(argv, timeout=timeout, env=env, policy=sandbox.gpu_policy())
    output = result.stdout + result.stderr
    errors = parse_errors(tool, output)
    ok = not result.timed_out and result.returncode == 0 and errors == 0
    return ToolReport(
        tool=tool,
        ok=ok,
        errors=errors,
        exit_code=result.returncode,
        seconds=result.seconds,
        timed_out=result.timed_out,
        output_tail=output[-3000:],
        killed_for=result.killed_for,
    )


def sanitize(
    library: Path,
    problem: Problem | None = None,
    *,
    tools: tuple[str, ...] = TOOLS,
    timeout: float = TOOL_TIMEOUT,
    config: EngineConfig | None = None,
) -> SanitizeResult:
    """Runs each tool on ``library``; stops at the first tool that fails."""
    problem = problem or DEFAULT_PROBLEM
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        raise ValueError(f"unknown sanitizer tools {unknown}: expected some of {TOOLS}")
    harness = build_harness(config)
    reports: list[ToolReport] = []
    for tool in tools:
        report = run_tool(tool, harness, library, problem, timeout=timeout)
        reports.append(report)
        if not report.ok:
            return SanitizeResult(
                False, *failure_of(report), problem=problem.key, reports=tuple(reports)
            )
    return SanitizeResult(True, "ok", "", problem=problem.key, reports=tuple(reports))


def failure_of(report: ToolReport) -> tuple[str, str]:
    """(reason, message) for a failing tool report."""
    if report.timed_out:
        return "timeout", f"{report.tool} did not finish"
    if report.killed_for == "memory":
        return "memory", f"{report.tool} went over the host memory limit"
    if report.errors:
        return report.tool, f"{report.tool} found {report.errors} error(s)"
    if report.exit_code == 3:
        return "call_failed", "the library returned an error or faulted under the sanitizer"
    return "setup", f"{report.tool} exited with status {report.exit_code} and no summary"
