"""The harness run on the GPU: verification of honest and known-bad kernels,
and every baseline × both layouts in the device and cudal2-offline protocols over 12 shapes.

Writes verification.json and baselines.json under --out, and prints tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.config import load as load_config
from engine.problem import Layout, Problem
from engine.timing.measure import load_shim, measure
from engine.timing.tables import format_table
from engine.verify import harness_kernels
from engine.verify.verifier import verify

SHAPES = (
    "64x64x64",
    "256x256x256",
    "512x512x512",
    "1024x1024x1024",
    "2048x2048x2048",
    "4096x4096x4096",
    "8192x8192x8192",
    "64x8192x16384",
    "16384x128x8192",
    "1024x4096x16384",
    "4096x16384x256",
    "2048x8192x1024",
)
QUICK_SHAPES = ("256x256x256", "4096x4096x4096")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def verification(problems: list[Problem]) -> dict:
    report: dict = {"honest": {}}  # known-bad kernels: tests/engine/verify/test_gpu_harness.py
    kernels = {
        "reference": harness_kernels.REFERENCE,
        "cublas_wrapped": harness_kernels.GOOD_KERNELS / "cublas_wrapped.cu",
    }
    for layout in (Layout.NN, Layout.TN):
        built_libraries = harness_kernels.build(list(kernels.values()), layout)
        built = dict(zip(kernels, built_libraries, strict=True))
        for problem in [p for p in problems if p.layout is layout]:
            for name, result in built.items():
                assert result.ok, result.log
                verdict = verify(result.library, problem)
                report["honest"][f"{name}@{problem.key}"] = verdict.to_dict()
                log(f"verify {name} {problem}: {verdict.reason} {verdict.message}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="two shapes only (smoke run)")
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--protocol", action="append")
    parser.add_argument("--shapes", help="MxNxK, comma separated (default: the 12 harness shapes)")
    args = parser.parse_args()
    shapes = args.shapes.split(",") if args.shapes else QUICK_SHAPES if args.quick else SHAPES
    problems = [Problem.parse(s) for s in shapes]
    if not args.skip_verify:
        tn = [Problem(p.m, p.n, p.k, Layout.TN) for p in problems[::3]]
        report = verification(problems + tn)
        (args.out / "verification.json").write_text(json.dumps(report, indent=1, default=str))
    shim = load_shim(load_config())
    records = []
    for problem in problems:
        record = measure(
            problem,
            protocols=tuple(args.protocol or ("device", "offline")),
            shim=shim,
            device_runs=3,
            progress=log,
        )
        records.append(record)
        print(format_table(record), flush=True)
        (args.out / "baselines.json").write_text(json.dumps(records, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
