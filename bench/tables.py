"""Markdown tables from committed GPU results (used for bench/results/*/README.md and README.md).

python bench/tables.py baselines bench/results/2026-12-02-h200-harness/baselines.json
python bench/tables.py families bench/results/2026-12-02-h200-families/families-run*.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

BASELINES = ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")


def baselines_table(records: list[dict]) -> str:
    env = records[0]["environment"]
    lines = [
        f"{env['gpu_name']}, driver {env['driver']}, CUDA {env['cuda_runtime']}, cuBLASLt "
        f"{env['cublaslt_version']}, torch {env['torch_version']}, {env['recorded_at'][:10]}. "
        "Best of NN/TN per baseline; device = median of CUDA-event times with L2 flushed; "
        "offline = mean host time with a sync per call (CUDA-L2's protocol).",
        "",
        "| shape | "
        + " | ".join(f"{b} device µs" for b in BASELINES)
        + " | autotune TFLOP/s | autotune offline µs | device spread (3 runs) |",
        "|---" * (len(BASELINES) + 4) + "|",
    ]
    for rec in records:
        p = rec["problem"]
        device, offline = rec["protocols"]["device"], rec["protocols"]["offline"]
        best = device["best_baselines"]
        auto = best["cublaslt_autotune"]
        cells = [f"{best[b]['seconds'] * 1e6:.2f} ({best[b]['layout']})" for b in BASELINES]
        auto_name = f"cublaslt_autotune_{auto['layout']}"
        spread = max(device.get("run_to_run_spread", {0: 0.0}).values())
        lines.append(
            f"| {p['m']}x{p['n']}x{p['k']} | "
            + " | ".join(cells)
            + f" | {device['tflops'][auto_name]:.1f}"
            + f" | {offline['best_baselines']['cublaslt_autotune']['seconds'] * 1e6:.2f}"
            + f" | {spread * 100:.2f} % |"
        )
    return "\n".join(lines)


def families_table(reports: list[dict]) -> str:
    lines = [
        "| shape | configs timed | best config | vs cuBLASLt-autotune | vs cuBLAS | vs torch |",
        "|---|---|---|---|---|---|",
    ]
    speedups = []
    for report in reports:
        for row in report["sweep"]:
            s = row["best_speedups"] or {}
            if not s:
                continue
            speedups.append(s["cublaslt_autotune"])
            lines.append(
                f"| {row['problem']} | {row['candidates']} | `{row['best']}` | "
                f"{s['cublaslt_autotune']:.3f} | {s['cublas']:.3f} | {s['torch']:.3f} |"
            )
    geomean = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
    lines.append(
        f"\nGeomean speedup of the best config over cuBLASLt-autotune: {geomean:.3f} "
        f"over {len(speedups)} (shape, layout) rows."
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    kind, paths = argv[0], [Path(p) for p in argv[1:]]
    if kind == "baselines":
        print(baselines_table(json.loads(paths[0].read_text())))
    elif kind == "families":
        print(families_table([json.loads(p.read_text()) for p in paths]))
    else:
        raise SystemExit("usage: tables.py baselines|families FILE...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
