"""Which kernels does cuBLASLt run on the 64-shape campaign's problems?

For each problem, the heuristic's first ``--algos`` algorithms (no timing: a heuristic query per
problem), each named by its configuration (engine.timing.cublaslt_kernels: tile, stages, cluster,
split-K, in our orientation). With ``--autotune SHAPES`` (``large``: the sample's large shapes;
or a comma list), those problems are also autotuned as every measurement autotunes them
(engine.timing.baselines.autotune, device protocol, the engine's autotune cache: a later campaign on
this machine reuses the choice instead of timing it again), and the pick is named too.

    python3 bench/cublaslt_kernels.py [--layouts nn,tn] [--algos 4] [--autotune large|SHAPES]
        --out FILE

The JSON (``kernels``: problem key → ``heuristic`` list, ``autotune`` or null) is what
``engine optimize --cublaslt-kernels FILE`` reads to propose our configs nearest to them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grid64 import shapes_for  # noqa: E402
from engine.publish.report import LARGE_LOG2_MNK  # noqa: E402
from engine.timing import baselines  # noqa: E402

LAYOUTS = ("nn", "tn")


def problems(layouts: list[str]) -> list[tuple[int, int, int, str]]:
    """The campaign's problems: every sampled shape in NN, a quarter of them in TN."""
    return [(*shape, layout) for layout in layouts for shape in shapes_for(layout)]


def autotuned_shapes(spec: str, chosen: list[tuple[int, int, int, str]]) -> set[tuple[int, ...]]:
    if not spec:
        return set()
    if spec == "large":
        return {(m, n, k) for m, n, k, _ in chosen if m * n * k >= 2**LARGE_LOG2_MNK}
    return {tuple(int(v) for v in s.split("x")) for s in spec.split(",") if s}


def kernels_of(
    shim: Any, problem: tuple[int, int, int, str], algos: int
) -> tuple[int, list[dict[str, Any] | None]]:
    """The number of algorithms the heuristic offers and the first ``algos`` of them, named."""
    m, n, k, layout = problem
    plan, count = shim.cublaslt_plan(
        m, n, k, layout == "tn", baselines.LT_WORKSPACE_BYTES, baselines.AUTOTUNE_MAX_ALGOS
    )
    return count, [baselines.lt_kernel(shim, plan, i) for i in range(min(algos, count))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="nn,tn")
    parser.add_argument("--algos", type=int, default=4, help="heuristic algorithms to name")
    parser.add_argument("--autotune", default="", help="'large' or MxNxK,... to autotune too")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    layouts = [v for v in args.layouts.split(",") if v]
    if unknown := set(layouts) - set(LAYOUTS):
        parser.error(f"unknown layouts {sorted(unknown)}: expected nn and/or tn")

    from engine.config import load as load_config
    from engine.gpu.environment import collect
    from engine.problem import Layout, Problem
    from engine.timing.measure import load_shim
    from engine.timing.protocols import Bench

    config = load_config()
    shim = load_shim(config)
    environment = collect(cublaslt_version=shim.cublaslt_version)
    cache = baselines.autotune_cache_path(config, environment.key)
    chosen = problems(layouts)
    tuned = autotuned_shapes(args.autotune, chosen)
    out: dict[str, Any] = {"environment": environment.to_dict(), "kernels": {}}
    started = time.monotonic()
    for m, n, k, layout in chosen:
        key = f"{m}x{n}x{k}_{layout}"
        count, heuristic = kernels_of(shim, (m, n, k, layout), args.algos)
        entry: dict[str, Any] = {"candidates": count, "heuristic": heuristic, "autotune": None}
        if (m, n, k) in tuned:
            bench = Bench(Problem(m, n, k, Layout(layout)), seed=0)
            _, _, report = baselines.autotune(bench, shim, Layout(layout), cache=cache)
            entry["autotune"] = report["kernel"]
            entry["autotune_cached"] = report["cached"]
        out["kernels"][key] = entry
        first = heuristic[0]["label"] if heuristic and heuristic[0] else "–"
        picked = entry["autotune"]["label"] if entry["autotune"] else ""
        print(f"{key:24s} {count:3d} algos  heuristic {first:40s} {picked}", flush=True)
    out["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(chosen)} problems in {out['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
