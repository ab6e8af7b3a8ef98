"""Do chosen library configs lift the grid's shapes where the campaign lost most?
Two sets (``--set``):

- ``deep`` (the default): the deep split-K configs (sm80: 8, 16 and 32 splits; sm90 stream-K
  split-K: 4, 8 and 16) on the small-M·N, long-K shapes (bench/NOTES.md §13 and §15);
- ``raster``: the ping-pong 128×128×64 kernel with each raster order and swizzle, beside the
  same kernel with the scheduler's defaults, on the large NN shapes under 0.98× (§17);
- ``reduction``: the deep sm80 split-K tiles with each split reduction (a second kernel, the
  same launched with programmatic dependent launch, or inside a cluster), on the same shapes
  as ``deep`` (§18);
- ``splitn``: the cooperative kernels whose warpgroups split the tile along N (cuBLASLt's
  192×192 and 128×320 tiles, and 128×256), beside the 128×256 split along M and the ping-pong
  128×128 that won most large shapes, on the shapes where cuBLASLt runs those tiles (§22);
- ``transposed``: the tiles M below 64 (the transposed problem) beside the sm80 kernels that
  won there, on the small-M shapes where cuBLASLt runs 8- to 48-row tiles (§22);
- ``epilogue``: the ping-pong 128×128 and cooperative 128×256 kernels with a 128-column TMA
  epilogue tile beside the builder's, on the short-K wide shapes (§22);
- ``oddn``: the odd tile N (96, 160, 192: cooperative 128-row and ping-pong 64-row tiles) beside
  the same schedules at 128 and 256, clusters 1×1 and 2×1, on shapes where the 128- and 256-wide
  tiles waste more of the SMs (padding, a partial last wave) and one where they do not (§33).

For each shape: the set's configs that are valid for it are verified (the GPU step's own path,
engine.verify.verifier.Verifications), then the verified ones are timed against every baseline in
the device protocol by the campaign finals' child (engine.execution.final, several shapes per
child). Printed and written beside the campaign's search-time best for the shape.

    python3 bench/deep_splitk.py --db CAMPAIGN.sqlite
        [--set deep|raster|reduction|splitn|transposed|epilogue|oddn]
        [--shapes ...]
        [--verify-jobs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grid64 import search_summary  # noqa: E402
from engine.codegen.library import (  # noqa: E402
    SM80_DEEP_SPLIT_TILES,
    SM80_DEEP_SPLITS,
    SM80_FUSED_SPLITS,
    SM90_DEEP_SPLITS,
    SM90_SWIZZLED_PINGPONG_TILE,
    library,
)
from engine.compilation.compile import compile_configs  # noqa: E402
from engine.execution.final import remeasure_batch  # noqa: E402
from engine.gpu import cuda_driver  # noqa: E402
from engine.problem import Layout, Problem  # noqa: E402
from engine.verify.verifier import Verifications, new_fork_server  # noqa: E402

BASELINE = "cublaslt_autotune"
SHAPES = (
    "128x128x12288,128x128x16384,64x1024x12288,1024x64x12288,512x256x8192,128x2048x12288,"
    "64x4096x16384,2048x256x12288,512x256x4096,64x1024x4096"
)
# the deep set's shapes, and two mid-size ones where one split leaves SMs idle or a second
# kernel is a visible share (128×4096×2048 0.73×, 4096×64×1024 0.87×)
REDUCTION_SHAPES = f"{SHAPES},128x4096x2048,4096x64x1024"
# the four large NN shapes of the 64-shape campaign furthest under 0.98× cuBLASLt-autotune (its
# report; the other five: 12288x4096x16384, 16384x16384x8192, 16384x4096x8192, 8192x12288x4096,
# 8192x8192x8192)
LARGE_SHAPES = "16384x12288x512,12288x12288x1024,8192x8192x2048,4096x12288x8192"
# where cuBLASLt runs 192×192 (16384x12288x512), 128×320 (16384x4096x8192) and 128×256 with a
# 2×1 cluster (the short-K wide shapes, where the campaign's finals reached 0.91–0.92×)
SPLIT_N_SHAPES = "16384x12288x512,16384x4096x8192,8192x2048x128,2048x12288x128,4096x1024x512"
# where cuBLASLt-autotune runs 8- to 48-row tiles (the campaign's finals), the long-K ones included
TRANSPOSED_SHAPES = (
    "2048x128x512,4096x64x1024,512x512x256,64x4096x16384,64x1024x12288,128x128x16384"
)
# short K, wide M·N: the epilogue's stores dominate (the finals reached 0.90–0.95×)
EPILOGUE_SHAPES = "8192x2048x128,2048x12288x128,1024x4096x64,12288x8192x256,512x1024x512"
# an odd tile N wastes less of the 132 SMs' tile slots (the tiles' padding and the last wave's
# idle SMs) than 128 or 256 on the first four (1.00 or 0.97 of C's area against 0.91–0.92); not
# on the last, a control (0.91 either way)
ODD_N_SHAPES = "4096x3168x4096,4096x2880x2048,8192x1440x4096,4096x1920x4096,2048x1440x8192"
ODD_N = (96, 160, 192)
# the sm80 kernels that won those shapes in the 64-shape campaign (its report)
TRANSPOSED_YARDSTICKS = (
    "hgemm_sm80_32x64x64_w1x2_s4_nn_sw1_splitk1",
    "hgemm_sm80_32x64x64_w1x2_s4_nn_sw1_splitk4",
    "hgemm_sm80_64x64x64_w2x2_s4_nn_sw1_splitk16_pdl",
    "hgemm_sm80_64x64x64_w2x2_s4_nn_sw1_splitk16_cluster",
)


def deep_configs() -> list[Any]:
    """The library's deep split-K configs: sm80 (a reduction kernel after the GEMM) and sm90
    (stream-K's split-K, reduced inside the kernel)."""
    sm80 = [
        c
        for c in library("sm80", Layout.NN)
        if c.splits in SM80_DEEP_SPLITS and c.reduction == "kernel"
    ]
    sm90 = [
        c
        for c in library("sm90", Layout.NN)
        if c.decomposition == "splitk" and c.splits in SM90_DEEP_SPLITS
    ]
    return sm80 + sm90


def raster_configs() -> list[Any]:
    """The library's ping-pong 128×128×64 kernels with the TMA epilogue: every raster order and
    swizzle, and the scheduler's defaults, in every cluster shape."""
    tm, tn, tk = SM90_SWIZZLED_PINGPONG_TILE
    return [
        c
        for c in library("sm90", Layout.NN)
        if c.schedule == "pingpong"
        and c.epilogue == "tma"
        and (c.tile_m, c.tile_n, c.tile_k) == (tm, tn, tk)
    ]


def reduction_configs() -> list[Any]:
    """The library's deep sm80 split-K tiles at every split count a fused reduction has, with
    every reduction: the two-kernel ones are the yardstick."""
    tiles = {(tm, tn, tk) for tm, tn, tk, _, _ in SM80_DEEP_SPLIT_TILES}
    splits = {s for fused in SM80_FUSED_SPLITS.values() for s in fused}
    return [
        c
        for c in library("sm80", Layout.NN)
        if (c.tile_m, c.tile_n, c.tile_k) in tiles and c.stages == 4 and c.splits in splits
    ]


def split_n_configs() -> list[Any]:
    """The library's cooperative kernels with warpgroups split along N, the same 128×256 tiles
    split along M, and the ping-pong 128×128×64 with the scheduler's defaults, each in every
    cluster shape, TMA epilogue, persistent."""
    return [
        c
        for c in library("sm90", Layout.NN)
        if c.epilogue == "tma"
        and not c.epilogue_n
        and c.scheduler == "persistent"
        and c.raster == "heuristic"
        and (
            c.split_n
            or (c.schedule, c.tile_m, c.tile_n, c.tile_k) == ("coop", 128, 256, 64)
            or (c.schedule, c.tile_m, c.tile_n, c.tile_k) == ("pingpong", 128, 128, 64)
        )
    ]


def transposed_configs() -> list[Any]:
    """The library's sm90 tiles M below 64 (the transposed problem), and the sm80 kernels that
    won their shapes."""
    sm90 = [c for c in library("sm90", Layout.NN) if c.swapped]
    sm80 = [c for c in library("sm80", Layout.NN) if c.name in TRANSPOSED_YARDSTICKS]
    return sm90 + sm80


def epilogue_configs() -> list[Any]:
    """The library's kernels with a 128-column TMA epilogue tile, and the same kernels with the
    builder's (persistent, the scheduler's raster order)."""
    wide = [c for c in library("sm90", Layout.NN) if c.epilogue_n]
    return [replace(c, epilogue_n=0) for c in wide] + wide


def odd_n_configs() -> list[Any]:
    """The library's odd-N tiles (not the 192×192 split-N ones) and, as yardsticks, the same
    schedules and row counts at N 128 and 256, clusters 1×1 and 2×1, TMA epilogue, persistent."""
    rows = {"coop": 128, "pingpong": 64}
    return [
        c
        for c in library("sm90", Layout.NN)
        if rows.get(c.schedule) == c.tile_m
        and c.tile_n in (*ODD_N, 128, 256)
        and c.tile_k == 64
        and not c.split_n
        and (c.cluster_m, c.cluster_n) in ((1, 1), (2, 1))
        and c.epilogue == "tma"
        and not c.epilogue_n
        and c.scheduler == "persistent"
        and c.raster == "heuristic"
    ]


CONFIG_SETS = {  # --set: its configs, its default shapes, what it asks
    "deep": (deep_configs, SHAPES, "deep split-K configs on the small-M·N, long-K shapes"),
    "raster": (raster_configs, LARGE_SHAPES, "raster orders and swizzles on the large shapes"),
    "reduction": (
        reduction_configs,
        REDUCTION_SHAPES,
        "split-K reductions on the small-M·N, long-K shapes",
    ),
    "splitn": (
        split_n_configs,
        SPLIT_N_SHAPES,
        "warpgroups split along N on the shapes where cuBLASLt runs their tiles",
    ),
    "transposed": (
        transposed_configs,
        TRANSPOSED_SHAPES,
        "tiles M below 64 (the transposed problem) on the shapes where cuBLASLt runs them",
    ),
    "epilogue": (
        epilogue_configs,
        EPILOGUE_SHAPES,
        "a 128-column TMA epilogue tile on the short-K wide shapes",
    ),
    "oddn": (
        odd_n_configs,
        ODD_N_SHAPES,
        "odd tile N (96, 160, 192) where 128 and 256 leave a partial last wave",
    ),
}


def valid_for(problem: Problem, configs: list[Any]) -> list[Any]:
    """The configs valid for ``problem``, by the rule a campaign's search space uses (each
    family's own arch: sm_90a for sm90, which ``is_valid(problem, "sm_90")`` would refuse)."""
    return [c for c in configs if c.is_valid(problem)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="the grid64 campaign database")
    parser.add_argument("--set", choices=sorted(CONFIG_SETS), default="deep")
    parser.add_argument("--shapes", help="default: the set's own")
    parser.add_argument("--device-seconds", type=float, default=1.0)
    parser.add_argument("--verify-jobs", type=int, default=8, help="verifiers at once")
    parser.add_argument("--out", type=Path, default=Path("deep-splitk.json"))
    args = parser.parse_args(argv)

    make_configs, default_shapes, question = CONFIG_SETS[args.set]
    searched = {s["problem"]: s["best_speedup"] for s in search_summary(args.db)["shapes"]}
    configs = make_configs()
    built = compile_configs(configs, target_arch=cuda_driver.local_arch())
    libraries = {c.name: b.library for c, b in zip(configs, built, strict=True) if b.ok}
    print(f"{len(libraries)} of {len(configs)} {args.set} configs built", flush=True)
    jobs, verdicts = [], {}
    server, folder = new_fork_server(start=True)  # one for every shape: torch imported once
    try:
        for shape in (args.shapes or default_shapes).split(","):
            problem = Problem.parse(shape)
            names = [c.name for c in valid_for(problem, configs) if c.name in libraries]
            batch = Verifications(
                [libraries[n] for n in names], problem, jobs=args.verify_jobs, fork_server=server
            )
            results = batch.results()
            verdicts[problem.key] = {n: r.reason for n, r in zip(names, results, strict=True)}
            ok = {n: libraries[n] for n, r in zip(names, results, strict=True) if r.ok}
            print(f"{problem}: {len(ok)} of {len(names)} verified", flush=True)
            if ok:
                jobs.append((problem, ok))
    finally:
        server.close()
        folder.cleanup()
    records = remeasure_batch(jobs, protocols=("device",), device_seconds=args.device_seconds)
    shapes = []
    for (problem, _), record in zip(jobs, records, strict=True):
        if "error" in record:
            shapes.append({"problem": problem.key, "error": record["error"]})
            print(f"{problem}: {record['error'][:300]}")
            continue
        device = record["protocols"]["device"]
        speedups = {n: s[BASELINE] for n, s in device["speedups"].items()}
        best = max(speedups, key=speedups.get, default=None)
        shapes.append(
            {
                "problem": problem.key,
                "speedups": speedups,
                "best": best,
                "best_speedup": speedups.get(best),
                "search_best_speedup": searched.get(problem.key),
                "seconds": device["seconds"],
            }
        )
        print(
            f"{problem}: {args.set} best {speedups.get(best, 0):.3f}x {BASELINE} ({best}); "
            f"the campaign's search-time best {searched.get(problem.key) or 0:.3f}x",
            flush=True,
        )
    report = {
        "what": f"{question} (issue 11)",
        "set": args.set,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "baseline": BASELINE,
        "protocol": "device (finals child, several shapes per process)",
        "environment": records[0].get("environment") if records else None,
        "verdicts": verdicts,
        "shapes": shapes,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
