"""Helpers shared by CLI subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.compilation.compile import CompileResult, compile_source
from engine.problem import Layout, Problem, ProblemError
from engine.timing.baseline_names import TORCH_TUNED


def problem_from_args(shape: str, layout: str) -> Problem:
    try:
        return Problem.parse(shape, layout)
    except ProblemError as exc:
        raise SystemExit(f"error: {exc}") from None


def add_problem_arguments(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    parser.add_argument(
        "--shape",
        required=True,
        action="append" if many else "store",
        help="problem size MxNxK, e.g. 4096x4096x4096" + (" (repeatable)" if many else ""),
    )
    parser.add_argument("--layout", default="nn", choices=[x.value for x in Layout])


def compile_kernel_file(
    path: Path, layout: Layout, *, extra_flags: tuple[str, ...] = ()
) -> CompileResult:
    """Compiles a user's .cu file (``-DGEMMFORGE_LAYOUT_TN`` tells layout-generic sources)."""
    if not path.is_file():
        raise SystemExit(f"error: no such kernel file: {path}")
    result = compile_source(
        path.read_text(),
        extra_flags=(f"-DGEMMFORGE_LAYOUT_TN={int(layout is Layout.TN)}", *extra_flags),
    )
    if not result.ok:
        print(result.log, file=sys.stderr)
        raise SystemExit(f"error: {path} did not compile: {result.error}")
    return result


def torch_baselines(value: str) -> tuple[str, ...]:
    """``--torch-baselines`` (comma separated names of TORCH_TUNED; '' for none)."""
    names = tuple(n for n in (x.strip() for x in value.split(",")) if n)
    unknown = [n for n in names if n not in TORCH_TUNED]
    if unknown:
        raise SystemExit(f"error: unknown torch baselines {unknown}: expected of {TORCH_TUNED}")
    return names
