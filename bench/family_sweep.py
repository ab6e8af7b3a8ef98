"""Kernel-family run on the GPU (issue 4): compile a uniform sample of valid configs of each
family in parallel, verify every one (isolated child processes, every input distribution), then
time the verified ones against every baseline over a set of shapes (device protocol).

Writes families.json under --out and prints the best config per shape with its speedup.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine.compile import compile_source
from engine.config import load as load_config
from engine.families import FAMILIES
from engine.measure import load_shim, measure
from engine.problem import Layout, Problem
from engine.verify import verify

VERIFY_SHAPES = (
    "256x256x256",
    "1000x264x520",
    "1024x1024x1024",
    "2048x512x4096",
    "128x4096x1024",
    "4096x4096x256",
    "192x8192x2048",
    "4096x4096x4096",
)
SWEEP_SHAPES = (
    "64x64x64",
    "128x128x128",
    "256x256x256",
    "512x512x512",
    "1024x1024x1024",
    "2048x2048x2048",
    "4096x4096x4096",
    "8192x8192x8192",
    "64x8192x16384",
    "128x4096x4096",
    "16384x128x8192",
    "1024x4096x16384",
    "4096x16384x256",
    "2048x8192x1024",
    "512x16384x2048",
    "8192x1024x4096",
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def best_configs(report: dict, top: int) -> list:
    """The ``top`` configs per layout with the best geomean speedup over cuBLASLt-autotune
    across the shapes an earlier sweep timed them on."""
    logs: dict[str, list[float]] = {}
    for row in report["sweep"]:
        seconds = row["seconds"]
        layout = row["problem"].rsplit("_", 1)[1]
        autotune = seconds.get(f"cublaslt_autotune_{layout}")
        auto_best = min(t for n, t in seconds.items() if n.startswith("cublaslt_autotune_"))
        for name, t in seconds.items():
            if name in report["configs"] and autotune:
                logs.setdefault(name, []).append(math.log(auto_best / t))
    chosen = []
    for layout in ("nn", "tn"):
        names = [n for n in logs if report["configs"][n]["layout"] == layout]
        names.sort(key=lambda n: -sum(logs[n]) / len(logs[n]))
        for name in names[:top]:
            entry = report["configs"][name]
            family = FAMILIES[entry["family"]]
            chosen.append(family.from_knobs({**entry["knobs"], "layout": layout}))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-layout", type=int, default=12, help="configs per family × layout")
    parser.add_argument("--verify-jobs", type=int, default=6)
    parser.add_argument(
        "--sweep-shapes",
        default=f"0:{len(SWEEP_SHAPES)}",
        help="slice of SWEEP_SHAPES to time, e.g. 8:16",
    )
    parser.add_argument(
        "--from-report",
        type=Path,
        help="take the configs from an earlier families.json instead of sampling",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=6,
        help="with --from-report: best configs per layout by geomean speedup",
    )
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    config = load_config()
    report: dict = {"configs": {}, "sweep": []}
    if args.from_report:
        configs = best_configs(json.loads(args.from_report.read_text()), args.top)
    else:
        configs = []
        for family in FAMILIES.values():
            for layout in (Layout.NN, Layout.TN):
                configs += family.sample(args.per_layout, layout=layout, seed=args.seed)
    log(f"compiling {len(configs)} configs on {config.compile_jobs} jobs")
    started = time.monotonic()
    with ThreadPoolExecutor(config.compile_jobs) as pool:
        built = list(pool.map(lambda c: compile_source(c.render(), archs=c.archs), configs))
    report["compile_wall_s"] = time.monotonic() - started
    log(f"compiled in {report['compile_wall_s']:.0f} s")

    def check(index: int) -> dict:
        cfg, result = configs[index], built[index]
        entry = {
            "family": cfg.FAMILY,
            "layout": cfg.layout.value,
            "knobs": cfg.knobs(),
            "compile_ok": result.ok,
            "compile_s": result.seconds,
            "compile_error": result.error,
            "registers": result.max_registers,
        }
        if result.ok:
            shape = VERIFY_SHAPES[index % len(VERIFY_SHAPES)]
            problem = Problem.parse(shape, cfg.layout)
            verdict = verify(result.library, problem, timeout=120)
            entry.update(verified_at=problem.key, verify=verdict.reason, message=verdict.message)
        return entry

    with ThreadPoolExecutor(args.verify_jobs) as pool:
        entries = list(pool.map(check, range(len(configs))))
    for cfg, entry in zip(configs, entries, strict=True):
        report["configs"][cfg.name] = entry
    passed = [
        (c, b) for c, b, e in zip(configs, built, entries, strict=True) if e.get("verify") == "ok"
    ]
    log(f"verified: {len(passed)} of {len(configs)} pass")
    (args.out / "families.json").write_text(json.dumps(report, indent=1, default=str))

    shim = load_shim(config)
    first, last = (int(x) for x in args.sweep_shapes.split(":"))
    for shape in SWEEP_SHAPES[first:last]:
        for layout in (Layout.NN, Layout.TN):
            problem = Problem.parse(shape, layout)
            candidates = {
                c.name: b.library for c, b in passed if c.layout is layout and c.is_valid(problem)
            }
            if not candidates:
                continue
            record = measure(
                problem,
                candidates=candidates,
                protocols=("device",),
                shim=shim,
                heat_seconds=1.0,
                progress=log,
            )
            device = record["protocols"]["device"]
            speedups = device["speedups"]
            best = max(speedups, key=lambda n: speedups[n]["cublaslt_autotune"], default=None)
            row = {
                "problem": problem.key,
                "candidates": len(candidates),
                "best": best,
                "best_speedups": speedups.get(best),
                "seconds": device["seconds"],
                "rejected_while_timed": device["rejected_while_timed"],
                "environment": record["environment"],
            }
            report["sweep"].append(row)
            if best:
                log(
                    f"{problem}: best {best} vs autotune "
                    f"{speedups[best]['cublaslt_autotune']:.3f}x ({len(candidates)} configs)"
                )
            (args.out / "families.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
