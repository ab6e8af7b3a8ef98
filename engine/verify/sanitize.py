"""compute-sanitizer as a gate: memcheck, racecheck and initcheck on a candidate library.

The verifier catches wrong answers; the sanitizer catches what can be right by luck — an
out-of-bounds read that lands in mapped memory, a shared-memory race that the current timing
hides, a read of memory nothing wrote. A kernel must pass all three tools before it can become a
shape's best or enter a bundle.

Each tool runs a small host harness (engine/cuda/sanitize_main.cu, built once per nvcc version
into the cache) that loads the library and calls it twice on one problem, so only the candidate's
own kernels are instrumented. The problems are chosen per kernel (:func:`sanitize_problems`):
small ones its config accepts, with a residue in every dimension it allows, and its target
problem. A library that refuses a problem before launching anything (a kernel built for
divisible shapes) has not been sanitized there, which is neither a finding nor a fault; findings,
a failed call, timeouts and a missing tool are data in the result.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from engine import abi
from engine.compilation.toolkit import CompileSetupError, compute_sanitizer_path, nvcc_version
from engine.config import COMPUTE_SANITIZER_VARIABLE, EngineConfig
from engine.config import load as load_config
from engine.isolation import processes, sandbox
from engine.problem import Layout, Problem, ProblemError

TOOLS = ("memcheck", "racecheck", "initcheck")
HARNESS_SOURCE = abi.CUDA_DIR / "sanitize_main.cu"
HARNESS_FILES = (HARNESS_SOURCE, abi.CUDA_DIR / "gemmforge_abi.h")
# Small problems, in order of preference per dimension: 264 and 280 are odd multiples of 8, so
# they leave a residue modulo every tile of the families' spaces (16-256, 48, 192, 320); the K
# values 8 past a multiple of 1024 do the same, the multiples of 1024 serve kernels that need K
# whole tiles, and the longer ones kernels with many K splits (one split a K tile at least).
SMALL_M = (264, 256)
SMALL_N = (280, 256)
SMALL_K = (1032, 1024, 2056, 2048, 4104, 4096, 8200, 8192)
DEFAULT_PROBLEM = Problem(SMALL_M[0], SMALL_N[0], SMALL_K[0], Layout.NN)
# A target problem is sanitized as it is up to this many multiply-adds, else shrunk in whole
# tiles to below it (its residues kept): racecheck, the slowest tool, took 3-8 s on the H200 for
# the 264x272x1032 problem (7.4e7, bench/results/grid64/campaign.finals.json), so at most about
# 4x that, 15-30 s.
MAX_TARGET_MACS = 1 << 28
UNKNOWN_TILE = 16  # a kernel that does not say its tile (model-written): the smallest MMA side
TOOL_TIMEOUT = 300.0
ERROR_EXIT = 97  # compute-sanitizer's exit status when it found errors
CALL_FAILED_EXIT = 3  # the harness's: the library failed after accepting, or the device did
REFUSED_EXIT = 4  # the harness's: the library refused the problem before launching anything
# reasons that say the environment failed, not the kernel: a verdict no one keeps
SETUP_REASONS = frozenset({"sanitizer_missing", "harness_build"})
_SUMMARY_RE = re.compile(r"ERROR SUMMARY: ([0-9]+) error")
_HAZARD_RE = re.compile(r"RACECHECK SUMMARY: ([0-9]+) hazard")


def tiles_of(config: Any) -> tuple[int, int, int]:
    """The config's CTA tile (M, N, K); UNKNOWN_TILE where it has none (model-written)."""
    m, n, k = (int(getattr(config, f"tile_{d}", UNKNOWN_TILE)) for d in "mnk")
    return m, n, k


def accepts(config: Any, problem: Problem) -> bool:
    """The config's own validity rule at ``problem`` (no config: every problem)."""
    return config is None or bool(config.is_valid(problem))


def residues(problem: Problem, tiles: tuple[int, int, int]) -> int:
    """In how many dimensions ``problem`` is not a whole number of tiles."""
    sizes = (problem.m, problem.n, problem.k)
    return sum(bool(size % tile) for size, tile in zip(sizes, tiles, strict=True))


def small_problem(config: Any, layout: Layout) -> Problem | None:
    """The small problem the config accepts with residues in the most dimensions (the fewest
    multiply-adds among those), or None when it accepts none of them."""
    tiles = tiles_of(config)
    shapes = [Problem(m, n, k, layout) for m, n, k in itertools.product(SMALL_M, SMALL_N, SMALL_K)]
    accepted = [p for p in shapes if accepts(config, p)]
    return min(accepted, key=lambda p: (-residues(p, tiles), p.m * p.n * p.k), default=None)


def shrunk_target(config: Any, target: Problem, max_macs: int = MAX_TARGET_MACS) -> Problem | None:
    """``target`` when it is at most ``max_macs`` multiply-adds; else the target with its
    largest dimensions halved in whole tiles (each keeps its residue modulo the tile, so the
    kernel takes the same edge paths) until it is, every step one the config accepts. None when
    no accepted step is left."""
    sizes = {"m": target.m, "n": target.n, "k": target.k}
    tiles = dict(zip("mnk", tiles_of(config), strict=True))
    while sizes["m"] * sizes["n"] * sizes["k"] > max_macs:
        for dim in sorted(sizes, key=lambda d: -sizes[d]):
            whole, residue = divmod(sizes[dim], tiles[dim])
            if whole < 2:
                continue
            smaller = {**sizes, dim: residue + tiles[dim] * (whole // 2)}
            try:
                problem = Problem(smaller["m"], smaller["n"], smaller["k"], target.layout)
            except ProblemError:
                continue
            if accepts(config, problem):
                sizes = smaller
                break
        else:
            return None
    return Problem(sizes["m"], sizes["n"], sizes["k"], target.layout)


def sanitize_problems(config: Any, target: Problem) -> tuple[Problem, ...]:
    """Where to sanitize a kernel of ``config`` (a family config; a model-written SourceKernel
    or None: a kernel without a validity rule) that is used at ``target``: the small problem it
    accepts with the most residues, then the target (:func:`shrunk_target`). The target alone
    when neither exists (its kernel was verified there)."""
    chosen: list[Problem] = []
    for problem in (small_problem(config, target.layout), shrunk_target(config, target)):
        if problem is not None and problem not in chosen:
            chosen.append(problem)
    return tuple(chosen) or (target,)


def harness_digest() -> str:
    """The harness's sources' sha256: a verdict is only as good as the harness that gave it."""
    digest = hashlib.sha256()
    for path in HARNESS_FILES:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def problems_key(problems: Sequence[Problem]) -> str:
    return "+".join(p.key for p in problems)


def verdict_key(config: Any, target: Problem) -> str:
    """What a verdict on a kernel of ``config`` used at ``target`` is kept under: the problems
    it ran and the harness's digest (a new harness or a new choice of problems is a new
    verdict)."""
    return f"{problems_key(sanitize_problems(config, target))}@{harness_digest()[:16]}"


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
    problem: str = ""  # the problem's key

    @property
    def refused(self) -> bool:
        """The library refused the problem before launching, and the tool found nothing."""
        return not self.timed_out and self.exit_code == REFUSED_EXIT and self.errors == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "problem": self.problem,
            "ok": self.ok,
            "refused": self.refused,
            "errors": self.errors,
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "output_tail": self.output_tail,
            "killed_for": self.killed_for,
        }


@dataclass(frozen=True)
class SanitizeResult:
    """``ok``: every tool passed on every problem the library accepted, and it accepted one.
    ``reason``: "ok"; "refused" (it refused every problem: nothing was sanitized); the first
    failing tool; "timeout", "memory", "call_failed", "setup"; or one of SETUP_REASONS."""

    ok: bool
    reason: str
    message: str
    problem: str  # the problems' keys, joined by "+"
    reports: tuple[ToolReport, ...] = field(default=())
    refused: tuple[str, ...] = ()  # the problems the library refused before launching
    harness: str = ""  # harness_digest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "problem": self.problem,
            "refused": list(self.refused),
            "harness": self.harness,
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
    """The harness executable, built once into ``<cache>/sanitize/<key>/``. Raises
    SanitizeSetupError (or engine.compilation.toolkit.CompileSetupError: no nvcc) when it
    cannot be built."""
    config = config or load_config()
    digest = hashlib.sha256()
    for path in HARNESS_FILES:
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
    tool: str,
    harness: Path,
    library: Path,
    problem: Problem,
    *,
    timeout: float = TOOL_TIMEOUT,
    sanitizer: Path | None = None,
) -> ToolReport:
    argv = [
        sanitizer or sanitizer_path(),
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
        exit_code=result.returncode if result.returncode is not None else -1,
        seconds=result.seconds,
        timed_out=result.timed_out,
        output_tail=output[-3000:],
        killed_for=result.killed_for,
        problem=problem.key,
    )


def sanitize(
    library: Path,
    problems: Problem | Sequence[Problem] | None = None,
    *,
    tools: tuple[str, ...] = TOOLS,
    timeout: float = TOOL_TIMEOUT,
    config: EngineConfig | None = None,
) -> SanitizeResult:
    """Runs each tool on ``library`` at each problem (DEFAULT_PROBLEM by default; a kernel's
    own: :func:`sanitize_problems`); stops at the first failure. A problem the library refuses
    is left after the first tool. ``timeout`` is per tool and problem."""
    if problems is None:
        problems = (DEFAULT_PROBLEM,)
    elif isinstance(problems, Problem):
        problems = (problems,)
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        raise ValueError(f"unknown sanitizer tools {unknown}: expected some of {TOOLS}")
    key, digest = problems_key(problems), harness_digest()

    def verdict(ok: bool, reason: str, message: str, **more: Any) -> SanitizeResult:
        return SanitizeResult(ok, reason, message, problem=key, harness=digest, **more)

    tool_path = compute_sanitizer_path(config)
    if tool_path is None:
        return verdict(
            False,
            "sanitizer_missing",
            "compute-sanitizer not found: install the CUDA toolkit or set "
            f"{COMPUTE_SANITIZER_VARIABLE}",
        )
    try:
        harness = build_harness(config)
    except (SanitizeSetupError, CompileSetupError) as exc:
        return verdict(False, "harness_build", str(exc))
    reports: list[ToolReport] = []
    refused: list[str] = []
    for problem in problems:
        for tool in tools:
            report = run_tool(tool, harness, library, problem, timeout=timeout, sanitizer=tool_path)
            reports.append(report)
            if report.refused:
                refused.append(problem.key)
                break
            if not report.ok:
                return verdict(
                    False, *failure_of(report), reports=tuple(reports), refused=tuple(refused)
                )
    if len(refused) == len(problems):
        return verdict(
            False,
            "refused",
            f"the library refused every problem ({key}) before launching: nothing was sanitized",
            reports=tuple(reports),
            refused=tuple(refused),
        )
    return verdict(True, "ok", "", reports=tuple(reports), refused=tuple(refused))


def failure_of(report: ToolReport) -> tuple[str, str]:
    """(reason, message) for a failing tool report."""
    where = f" at {report.problem}" if report.problem else ""
    if report.timed_out:
        return "timeout", f"{report.tool} did not finish{where}"
    if report.killed_for == "memory":
        return "memory", f"{report.tool} went over the host memory limit{where}"
    if report.errors:
        return report.tool, f"{report.tool} found {report.errors} error(s){where}"
    if report.exit_code == CALL_FAILED_EXIT:
        return (
            "call_failed",
            f"the library failed after accepting the problem, or faulted{where}",
        )
    return "setup", f"{report.tool} exited with status {report.exit_code} and no summary{where}"
