"""Every baseline, the torch-tuned ones included, on the 12 harness shapes and 16 grid64 shapes,
in one GPU call (bench/device/gpu_run.sh baselines): Inductor max-autotune and TunableOp
beside torch.matmul, cuBLAS and cuBLASLt, in the same sessions.

Per shape (one measure() session: every baseline in both layouts, interleaved): the device
protocol (with NVML power and SM clock over the run, and per runner alone on the larger shapes),
offline and graph, and server on the harness shapes; the floor model's prediction (calibrated
once at the start) before timing. Inductor tunes for seconds per shape and layout, so the run
keeps to a deadline: shapes go in an order that spreads sizes (a cut run still covers every
class), each written to baselines.json as it finishes, and no shape starts that the slowest
shape so far would not finish before the deadline.

    python bench/baselines_run.py --out OUT [--deadline 390] [--shapes MxNxK,...]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from engine.config import load as load_config
from engine.problem import Problem
from engine.publish.report import size_class
from engine.timing import floor_model
from engine.timing.baseline_names import BASELINES, TORCH_TUNED
from engine.timing.measure import load_shim, measure
from engine.timing.tables import format_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.device.gpu_run import SHAPES as HARNESS_SHAPES
from bench.grid64 import grid64

GRID_SHAPES = 16
REFERENCE = "cublaslt_autotune"
HARNESS_PROTOCOLS = ("device", "offline", "server", "graph")
GRID_PROTOCOLS = ("device", "offline", "graph")  # server's idle gaps cost 3-4 s a shape
POWER_MIN_LOG2_MNK = 33  # per-runner power on the shapes where the power cap can matter


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def grid_sample(count: int = GRID_SHAPES) -> list[str]:
    """``count`` grid64 shapes evenly spaced by size (so each class gets its share)."""
    shapes = grid64()
    step = len(shapes) / count
    return ["x".join(map(str, shapes[int(i * step)])) for i in range(count)]


def spread_order(items: list[str]) -> list[str]:
    """``items`` (sorted by size) reordered so that any prefix spans the sizes: the first, the
    middle, the quarters, then the points between (van der Corput order over the positions)."""

    def radical_inverse(i: int) -> float:
        value, base = 0.0, 0.5
        while i:
            value += base * (i & 1)
            i >>= 1
            base /= 2
        return value

    order: list[int] = []
    i = 0
    while len(order) < len(items):
        position = int(radical_inverse(i) * len(items))
        if position not in order:
            order.append(position)
        i += 1
    return [items[p] for p in order]


def by_size(shapes: list[str]) -> list[str]:
    return sorted(shapes, key=lambda s: math.prod(int(x) for x in s.split("x")))


def plan(harness: list[str], grid: list[str]) -> list[tuple[str, str]]:
    """(shape, "harness" | "grid"), alternating the two lists, each in spread order."""
    h = spread_order(by_size(harness))
    g = spread_order(by_size([s for s in grid if s not in harness]))
    out: list[tuple[str, str]] = []
    for i in range(max(len(h), len(g))):
        out += [(h[i], "harness")] if i < len(h) else []
        out += [(g[i], "grid")] if i < len(g) else []
    return out


def warm_inductor_pool() -> None:
    """Starts Inductor's compile workers now, while the shim builds and the model calibrates."""
    try:
        from torch._inductor.async_compile import AsyncCompile

        AsyncCompile.warm_pool()
    except Exception as exc:  # an older or newer torch: the first compile starts them instead
        log(f"inductor pool not warmed: {exc}")


def summary_row(record: dict[str, Any], origin: str) -> dict[str, Any]:
    p = record["problem"]
    device = record["protocols"]["device"]
    best = {b: v["seconds"] for b, v in device["best_baselines"].items()}
    tuning = {
        name: {
            "tuning_seconds": r.get("tuning_seconds"),
            "runs": r.get("runs"),
            "pick": (r.get("pick") or {}).get("name"),
            "kernels": [x.get("kernel") for x in r.get("results", [])] or None,
        }
        for name, r in record.get("autotune", {}).items()
        if name.startswith(TORCH_TUNED)
    }
    return {
        "problem": f"{p['m']}x{p['n']}x{p['k']}",
        "origin": origin,
        "size_class": size_class(p["m"], p["n"], p["k"]),
        "device_seconds": best,
        "vs_" + REFERENCE: {b: best[REFERENCE] / t for b, t in best.items() if REFERENCE in best},
        "predicted_seconds": record.get("prediction", {}).get("seconds"),
        "bound": record.get("prediction", {}).get("bound"),
        "power": device.get("power"),
        "tuning": tuning,
        "wall_seconds": record.get("wall_seconds"),
    }


def geomeans(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per class and over all: each baseline's geomean speed relative to cuBLASLt-autotune
    (> 1: faster than cuBLASLt-autotune)."""
    out: dict[str, dict[str, float]] = {}
    key = "vs_" + REFERENCE
    for group in ("all", "small", "medium", "large"):
        chosen = [r for r in rows if group in ("all", r["size_class"])]
        out[group] = {}
        for b in BASELINES:
            values = [r[key][b] for r in chosen if b in r[key]]
            if values:
                out[group][b] = math.exp(statistics.fmean(math.log(v) for v in values))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    heads = ["torch", "cublas", "Lt-heur", "Lt-auto", "Inductor", "TunableOp"]
    lines = [
        "device protocol, best of NN/TN, µs (cuBLASLt-autotune / baseline in brackets)",
        f"{'shape':18s} {'class':6s} {'floor':>7s} "
        + " ".join(f"{h:>16s}" for h in heads)
        + "  inductor pick",
    ]
    for r in rows:
        cells = []
        for b in BASELINES:
            t = r["device_seconds"].get(b)
            ratio = r["vs_" + REFERENCE].get(b)
            cells.append(f"{t * 1e6:8.2f} ({ratio:.3f})" if t and ratio else f"{'–':>16s}")
        picks = [
            f"{t['runs'] or '?'}/{t['pick'] or '?'} {t['tuning_seconds']:.0f}s"
            for name, t in sorted(r["tuning"].items())
            if name.startswith("inductor") and t.get("tuning_seconds") is not None
        ]
        floor = r["predicted_seconds"]
        lines.append(
            f"{r['problem']:18s} {r['size_class']:6s} "
            f"{floor * 1e6 if floor else float('nan'):7.2f} "
            + " ".join(f"{c:>16s}" for c in cells)
            + "  "
            + ", ".join(picks)
        )
    for group, values in geomeans(rows).items():
        parts = ", ".join(f"{b} {v:.3f}" for b, v in values.items())
        lines.append(f"geomean vs {REFERENCE} [{group}]: {parts}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline", type=float, default=390.0, help="seconds for the run")
    parser.add_argument("--shapes", help="MxNxK, comma separated (default: harness + grid64)")
    parser.add_argument("--grid-shapes", type=int, default=GRID_SHAPES)
    parser.add_argument("--device-seconds", type=float, default=3.0)
    parser.add_argument("--heat-seconds", type=float, default=1.0)
    parser.add_argument("--power-seconds", type=float, default=0.15)
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    warm_inductor_pool()
    if args.shapes:
        todo = [(s, "given") for s in args.shapes.split(",")]
    else:
        todo = plan(list(HARNESS_SHAPES), grid_sample(args.grid_shapes))
    shim = load_shim(load_config())
    model = floor_model.calibrate()
    log(f"floor model: {model}")
    records: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    slowest = 0.0
    skipped: list[str] = []
    for shape, origin in todo:
        left = args.deadline - (time.monotonic() - started)
        if left < slowest * 1.1:
            skipped.append(shape)
            continue
        problem = Problem.parse(shape)
        log2_mnk = math.log2(problem.m * problem.n * problem.k)
        harness = origin != "grid"
        shape_started = time.monotonic()
        prediction = floor_model.predict(problem, model)
        record = measure(
            problem,
            protocols=HARNESS_PROTOCOLS if harness else GRID_PROTOCOLS,
            shim=shim,
            heat_seconds=args.heat_seconds,
            device_seconds=args.device_seconds,
            probe_overhead=harness,
            extra_baselines=TORCH_TUNED,
            power_seconds=args.power_seconds if log2_mnk >= POWER_MIN_LOG2_MNK else 0.0,
            progress=log,
        )
        wall = time.monotonic() - shape_started
        slowest = max(slowest, wall)
        record["prediction"] = {**prediction.to_dict(), "model": model.to_dict()}
        record["origin"] = origin
        record["wall_seconds"] = wall
        records.append(record)
        rows.append(summary_row(record, origin))
        print(format_table(record), flush=True)
        log(f"{shape}: {wall:.1f} s")
        gc.collect()
        torch.cuda.empty_cache()  # the next shape's operands start from a clean pool
        (args.out / "baselines.json").write_text(
            json.dumps(
                {
                    "records": records,
                    "summary": rows,
                    "geomeans": geomeans(rows),
                    "floor_model": model.to_dict(),
                    "skipped_for_deadline": skipped,
                },
                indent=1,
                default=str,
            )
        )
    text = table(rows)
    if skipped:
        text += f"\nnot measured (deadline {args.deadline:.0f} s): {', '.join(skipped)}"
    print("\n" + text, flush=True)
    (args.out / "baselines-table.txt").write_text(text + "\n")
    rows_for_floor = [
        (Problem.parse(r["problem"]), min(r["device_seconds"].values())) for r in rows
    ]
    print("\n" + floor_model.format_comparison(floor_model.compare(rows_for_floor, model)))
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
