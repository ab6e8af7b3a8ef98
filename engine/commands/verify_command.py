"""``python -m engine verify FILE.cu --shape MxNxK``: compile and run every correctness check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.commands.common import add_problem_arguments, compile_kernel_file, problem_from_args
from engine.compilation import static_checks
from engine.verify.verifier import REASONS, verify


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("verify", help="verify a kernel file against every check")
    parser.add_argument("kernel", type=Path, help="a .cu file implementing the gemmforge C ABI")
    add_problem_arguments(parser, many=True)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per shape")
    parser.add_argument("--json", type=Path, help="write the reports here")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problems = [problem_from_args(shape, args.layout) for shape in args.shape]
    if not args.kernel.is_file():
        raise SystemExit(f"error: no such kernel file: {args.kernel}")
    source = args.kernel.read_text(errors="replace")
    if not _gate_passes(static_checks.check_candidate(source), args):
        return 1
    compiled = compile_kernel_file(
        args.kernel, problems[0].layout, extra_flags=static_checks.candidate_flags()
    )
    if not _gate_passes(static_checks.check_candidate(source, compiled.library), args):
        return 1
    reports = {}
    failures = 0
    for problem in problems:
        result = verify(compiled.library, problem, timeout=args.timeout)
        reports[problem.key] = result.to_dict()
        print(
            f"{problem.key}: {'PASS' if result.ok else 'REJECT'} [{result.reason}] {result.message}"
        )
        for check in result.checks:
            mark = "ok " if check["ok"] else "BAD"
            print(f"    {mark} {check['name']}: {json.dumps(check['detail'], default=str)}")
        if not result.ok:
            failures += 1
            print(f"    reason: {REASONS.get(result.reason, result.reason)}")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1, default=str))
    return 1 if failures else 0


def _gate_passes(result: static_checks.StaticResult, args: argparse.Namespace) -> bool:
    """Prints a static rejection (and writes it to --json); True when the gate passed."""
    if result.ok:
        return True
    print(f"static gate: REJECT [{result.reason}] {result.message}")
    for finding in result.findings:
        where = f"line {finding.line}: " if finding.line else ""
        print(f"    {where}{finding.message}")
    print(f"    reason: {REASONS.get(result.reason, result.reason)}")
    if args.json:
        args.json.write_text(json.dumps({"static": result.to_dict()}, indent=1))
    return False
