"""Kernel-family run on the GPU: compile configs of each family in parallel (a uniform
sample, the curated library with --library, or the best of an earlier report), verify each one as
soon as it is built (isolated child processes, every input distribution), then time the verified
ones against every baseline over a set of shapes (device protocol). With --sanitize-best, each
shape's best config must also pass compute-sanitizer (memcheck, racecheck, initcheck).

Writes families.json under --out after every shape and prints the best config per shape.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.codegen import FAMILIES
from engine.codegen.library import library
from engine.compilation.compile import compile_many
from engine.config import load as load_config
from engine.problem import Layout, Problem
from engine.timing.measure import load_shim, measure
from engine.verify.verifier import verify

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
    # 8 more for the replay table (>= 24 shapes)
    "4096x4096x1024",
    "1024x8192x8192",
    "8192x4096x2048",
    "256x8192x8192",
    "12288x4096x4096",
    "128x16384x16384",
    "4096x1024x16384",
    "2048x2048x8192",
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-layout", type=int, default=12, help="configs per family × layout")
    parser.add_argument("--library", action="store_true", help="the curated library configs")
    parser.add_argument(
        "--library-limit",
        action="append",
        metavar="FAMILY:LAYOUT=N",
        help="with --library: only N configs of that family and layout, spread over its library",
    )
    parser.add_argument("--families", default="sm90,sm80")
    parser.add_argument("--layouts", default="nn,tn", help="layouts to build and verify")
    parser.add_argument("--verify-jobs", type=int, default=6)
    parser.add_argument(
        "--time",
        action="append",
        metavar="LAYOUT=A:B",
        help="time LAYOUT on SWEEP_SHAPES[A:B] (repeatable; default nn=0:16 and tn=0:16)",
    )
    parser.add_argument(
        "--shapes",
        help="comma-separated MxNxK shapes that --time's spans index (default: SWEEP_SHAPES), "
        "e.g. bench/fresh_shapes.py's",
    )
    parser.add_argument("--device-seconds", type=float, default=20.0, help="per shape and run")
    parser.add_argument("--deadline", type=float, help="start no new shape after N seconds")
    parser.add_argument("--sanitize-best", action="store_true")
    parser.add_argument(
        "--merge", type=Path, help="an earlier families.json whose timed shapes this run extends"
    )
    parser.add_argument(
        "--verdicts",
        type=Path,
        help="an earlier families.json of this machine: configs it verified are not verified again",
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
    return parser.parse_args()


def choose_configs(args: argparse.Namespace) -> list:
    if args.from_report:
        return best_configs(json.loads(args.from_report.read_text()), args.top)
    configs = []
    for name in args.families.split(","):
        family = FAMILIES[name]
        for layout in (Layout.parse(x) for x in args.layouts.split(",")):
            if args.library:
                configs += library(name, layout, library_limits(args).get((name, layout.value)))
            else:
                configs += family.sample(args.per_layout, layout=layout, seed=args.seed)
    return configs


def library_limits(args: argparse.Namespace) -> dict[tuple[str, str], int]:
    """``["sm90:tn=72"]`` → {("sm90", "tn"): 72}."""
    limits = {}
    for spec in args.library_limit or ():
        key, _, count = spec.partition("=")
        family, _, layout = key.partition(":")
        limits[(family, layout)] = int(count)
    return limits


def timing_plan(
    specs: list[str], shapes: tuple[str, ...] = SWEEP_SHAPES
) -> list[tuple[str, Layout]]:
    """``["nn=0:16", "tn=0:8"]`` → (shape, layout) pairs of ``shapes``, shape by shape."""
    plan: list[tuple[int, str, Layout]] = []
    for spec in specs:
        layout_text, _, span = spec.partition("=")
        first, last = (int(x) for x in span.split(":"))
        layout = Layout.parse(layout_text)
        plan += [(i, shapes[i], layout) for i in range(first, min(last, len(shapes)))]
    plan.sort(key=lambda item: (item[0], item[2].value))
    return [(shape, layout) for _, shape, layout in plan]


def local_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def build_and_verify(
    configs: list,
    args: argparse.Namespace,
    config,
    verify_on: Callable[[int, Any], Problem] | None = None,
) -> tuple[list, list, float]:
    """Compiles every config (per family, in parallel) and verifies each one as soon as its
    build finishes; returns (build results, report entries, compile wall seconds).

    ``verify_on(index, config)``: the problem a config is verified on (default: one of
    VERIFY_SHAPES in turn, in the config's layout)."""
    arch = local_arch()
    built: list = [None] * len(configs)
    futures: dict[int, Future] = {}
    verifier = ThreadPoolExecutor(args.verify_jobs)
    done = 0

    earlier = json.loads(args.verdicts.read_text())["configs"] if args.verdicts else {}

    def check(index: int) -> dict:
        cfg, result = configs[index], built[index]
        if result.ok and earlier.get(cfg.name, {}).get("verify") == "ok":
            return {**earlier[cfg.name], "verdict_from": str(args.verdicts)}
        entry = {
            "family": cfg.FAMILY,
            "layout": cfg.layout.value,
            "knobs": cfg.knobs(),
            "archs": list(cfg.archs_for(arch)),
            "compile_ok": result.ok,
            "compile_s": result.seconds,
            "compile_cached": result.cached,
            "compile_error": result.error,
            "registers": result.max_registers,
            "spills": result.spills,
        }
        if result.ok:
            if verify_on is None:
                problem = Problem.parse(VERIFY_SHAPES[index % len(VERIFY_SHAPES)], cfg.layout)
            else:
                problem = verify_on(index, cfg)
            verdict = verify(result.library, problem, timeout=120)
            entry.update(verified_at=problem.key, verify=verdict.reason, message=verdict.message)
        return entry

    def build_family(family: str) -> None:
        where = [i for i, c in enumerate(configs) if family == c.FAMILY]

        def progress(j: int, result) -> None:
            nonlocal done
            index = where[j]
            built[index] = result
            futures[index] = verifier.submit(check, index)
            done += 1
            if done % 20 == 0:
                log(f"built {done}/{len(configs)}")

        compile_many(
            [configs[i].render() for i in where],
            archs=FAMILIES[family].archs_for(arch),
            jobs=config.compile_jobs,
            config=config,
            progress=progress,
        )

    started = time.monotonic()
    families = sorted({c.FAMILY for c in configs})
    with ThreadPoolExecutor(len(families)) as pool:  # families build side by side
        list(pool.map(build_family, families))
    compile_wall = time.monotonic() - started
    log(f"compiled in {compile_wall:.0f} s")
    entries = [futures[i].result() for i in range(len(configs))]
    verifier.shutdown()
    return built, entries, compile_wall


def sanitize_best(report: dict, libraries: dict[str, Path], jobs: int = 4) -> None:
    """compute-sanitizer on every config that is some shape's best; results in the report."""
    from engine.verify.sanitize import sanitize

    names = sorted({row["best"] for row in report["sweep"] if row.get("best") in libraries})
    log(f"sanitizing {len(names)} best configs")
    with ThreadPoolExecutor(jobs) as pool:
        verdicts = dict(
            zip(names, pool.map(lambda n: sanitize(libraries[n], timeout=60), names), strict=True)
        )
    for name, verdict in verdicts.items():
        report["configs"][name]["sanitize"] = verdict.to_dict()
        log(f"sanitize {name}: {verdict.reason} {verdict.message}")


def sweep_row(problem: Problem, candidates: dict[str, Path], shim, device_seconds: float) -> dict:
    """Every baseline and ``candidates`` (name → verified library) timed on ``problem`` in the
    device protocol, interleaved in this process: one row of a sweep report (what
    engine.execution.executor.ReplayTable reads)."""
    record = measure(
        problem,
        candidates=candidates,
        protocols=("device",),
        shim=shim,
        heat_seconds=1.0,
        device_seconds=device_seconds,
        probe_overhead=False,
        progress=log,
    )
    device = record["protocols"]["device"]
    speedups = device["speedups"]
    best = max(speedups, key=lambda n: speedups[n]["cublaslt_autotune"], default=None)
    if best:
        log(
            f"{problem}: best {best} vs autotune "
            f"{speedups[best]['cublaslt_autotune']:.3f}x ({len(candidates)} configs)"
        )
    return {
        "problem": problem.key,
        "candidates": len(candidates),
        "best": best,
        "best_speedups": speedups.get(best),
        "seconds": device["seconds"],
        "reps": device.get("reps"),
        "rejected_while_timed": device["rejected_while_timed"],
        "autotune": record["autotune"],
        "environment": record["environment"],
    }


def main() -> int:
    args = parse_args()
    config = load_config()
    report: dict = {"configs": {}, "sweep": []}
    if args.merge:
        earlier = json.loads(args.merge.read_text())
        report = {k: earlier[k] for k in ("configs", "sweep", "not_timed") if k in earlier}
        report["merged"] = str(args.merge)
    configs = choose_configs(args)
    log(f"compiling {len(configs)} configs on {config.compile_jobs} jobs")
    started = time.monotonic()
    built, entries, report["compile_wall_s"] = build_and_verify(configs, args, config)
    for cfg, entry in zip(configs, entries, strict=True):
        report["configs"][cfg.name] = entry
    passed = [
        (c, b) for c, b, e in zip(configs, built, entries, strict=True) if e.get("verify") == "ok"
    ]
    failed = [n for n, e in report["configs"].items() if e.get("verify") not in ("ok", None)]
    log(f"verified: {len(passed)} of {len(configs)} pass; failing: {failed[:10]}")
    report["build_verify_wall_s"] = time.monotonic() - started
    (args.out / "families.json").write_text(json.dumps(report, indent=1, default=str))

    shim = load_shim(config)
    shapes = tuple(s.strip() for s in args.shapes.split(",")) if args.shapes else SWEEP_SHAPES
    plan = timing_plan(args.time or ["nn=0:16", "tn=0:16"], shapes)
    if args.merge:  # what the merged run's deadline left untimed comes first
        left = [tuple(key.rsplit("_", 1)) for key in report.pop("not_timed", [])]
        plan = [(shape, Layout.parse(layout)) for shape, layout in left] + plan
    for shape, layout in plan:
        if args.deadline and time.monotonic() - started > args.deadline:
            log(f"deadline reached: {shape}_{layout.value} and later not timed")
            report.setdefault("not_timed", []).append(f"{shape}_{layout.value}")
            continue
        problem = Problem.parse(shape, layout)
        candidates = {
            c.name: b.library for c, b in passed if c.layout is layout and c.is_valid(problem)
        }
        if not candidates:
            continue
        report["sweep"].append(sweep_row(problem, candidates, shim, args.device_seconds))
        (args.out / "families.json").write_text(json.dumps(report, indent=1, default=str))
    if args.sanitize_best:
        libraries = {c.name: b.library for c, b in passed}
        sanitize_best(report, libraries)
    report["wall_s"] = time.monotonic() - started
    (args.out / "families.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
