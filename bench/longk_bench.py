"""Long K, few output tiles (M·N ≤ 2^20, K ≥ 4·max(M, N)): split-K kernels against cuBLASLt.

Sets of configs (``--set``, several separated by commas):

- ``baseline``: the sm80 family's deep split-K tiles with each split reduction (a second kernel,
  the same launched with programmatic dependent launch, or one launch reduced inside a cluster
  through distributed shared memory) and the Triton family's split-K configs (the tile's last
  split reduces, one launch after a memset);
- ``longk``: the longk family's library (Hopper cluster split-K, wgmma, TMA);
- ``longk-push``: the push-reduction twins of its H100 winners (bulk DSMEM copies; outside the
  searched library until measured);
- ``longk-prefetch``: the same winners, pull and push, asking for the rest of each K slice
  into L2 once their pipeline is full (outside the searched library until measured);
- ``longk-variants``: those two sets and their pull twins alone (every variant beside its twin);
- ``longk-groups``: a tile's K over several small clusters summed in the workspace (``groups``),
  beside the pull configs that won a shape on the H100 (outside the searched library until
  measured);
- ``longk-multicast``: two output tiles along the wgmma N side sharing P's loads by TMA multicast
  (``multicast=2``), beside their single-tile twins (outside the searched library until measured);
- ``longk-send``: the winners reduced by send (``reduce="send"``: each CTA stores the accumulator
  pairs other CTAs own from its registers into their shared memory, no cluster barrier after the
  main loop), beside their pull twins (outside the searched library until measured);
- ``longk-swapwide``: swapped tiles 128 and 256 wide (Cᵀ = Bᵀ·Aᵀ with M on the wgmma N side),
  reduced by pull, for M ≫ N: unswapped, every 64-row tile of M re-reads all of B (32 times on
  2048×64×16384, as many bytes as A), and the searched library swaps only tiles up to 64 wide
  (``SWAPWIDE_SHAPES``: M ≥ N long-K shapes to run it on; outside the searched library until
  measured);
- ``longk-interleave``: the searched library's configs of at least 4 splits with the K tiles dealt
  to the cluster's CTAs in turn (``interleave``: the cluster's loads of one moment side by side
  along A's rows), beside their twins (outside the searched library until measured);
- ``longk-evict``: the same configs with A's loads under an L2 evict-first policy
  (``evict_first_a``), beside their twins (outside the searched library until measured);
- ``sm80-cluster``: the baseline set's sm80 configs reduced inside a cluster.

For each shape the set's configs valid for it are verified (the GPU step's verifier, fresh random
inputs) and the verified ones are timed in the device protocol beside torch.matmul, cuBLAS and
cuBLASLt (heuristic and autotuned), interleaved in one child process (engine.execution.final).

    python3 bench/longk_bench.py --set baseline [--shapes ...] [--compile-only] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.codegen.library import (  # noqa: E402
    SM80_DEEP_SPLIT_TILES,
    TRITON_SPLIT_TILES,
    library,
)
from engine.problem import Layout, Problem  # noqa: E402

BASELINE = "cublaslt_autotune"
SHAPES = "128x128x16384,512x256x8192,256x256x8192,128x256x12288,64x512x16384,256x128x4096"
# long-K shapes with M ≥ N, for longk-swapwide (none of them in a holdout draw so far)
SWAPWIDE_SHAPES = "4096x64x16384,2048x128x12288,1024x64x8192,512x256x8192"
SWAPWIDE_TILES = ((128, (4, 6, 8)), (256, (4,)))  # tile width, its stages that fit
SWAPWIDE_SPLITS = (4, 8, 16)


def baseline_configs(layout: Layout) -> list[Any]:
    """The sm80 deep split-K tiles at 4 stages with each reduction at 8 and 16 splits (the
    cluster one also at 4), and the Triton family's split-K configs at 8 and 16 splits."""
    tiles = {(tm, tn, tk) for tm, tn, tk, _, _ in SM80_DEEP_SPLIT_TILES}
    sm80 = [
        c
        for c in library("sm80", layout)
        if (c.tile_m, c.tile_n, c.tile_k) in tiles
        and c.stages == 4
        and (c.splits in (8, 16) or (c.splits == 4 and c.reduction == "cluster"))
    ]
    triton_tiles = {(tm, tn, tk) for tm, tn, tk, _, _ in TRITON_SPLIT_TILES}
    triton = [
        c
        for c in library("triton", layout)
        if c.splits >= 8 and ((c.tile_m, c.tile_n, c.tile_k) in triton_tiles or c.loads == "tma")
    ]
    return sm80 + triton


def longk_configs(layout: Layout) -> list[Any]:
    return list(library("longk", layout))


def longk_pull_configs(layout: Layout) -> list[Any]:
    """Every longk tiling reduced by pull: the searched library's pull twins beside it."""
    from engine.codegen.library import longk_pull_library

    return list(longk_pull_library(layout))


def longk_push_configs(layout: Layout) -> list[Any]:
    """The push-reduction twins of the longk winners (not in the searched library yet)."""
    from engine.codegen.library import longk_push_library

    return list(longk_push_library(layout))


def longk_prefetch_configs(layout: Layout) -> list[Any]:
    """The L2-prefetching twins of the longk winners, pull and push (not searched yet)."""
    from engine.codegen.library import longk_prefetch_library

    return list(longk_prefetch_library(layout))


def longk_variant_configs(layout: Layout) -> list[Any]:
    """The push and prefetch variants with their pull twins and nothing else: the shortest run
    that reads every variant against its twin."""
    from engine.codegen.library import takes_push

    twins = [c for c in longk_pull_configs(layout) if takes_push(c)]
    return twins + longk_push_configs(layout) + longk_prefetch_configs(layout)


def longk_groups_configs(layout: Layout) -> list[Any]:
    """The groups configs and, to read them against, the pull winners of the H100 runs."""
    from engine.codegen.library import longk_groups_library, takes_push

    winners = [c for c in longk_pull_configs(layout) if takes_push(c)]
    return winners + list(longk_groups_library(layout))


def longk_multicast_configs(layout: Layout) -> list[Any]:
    """The multicast configs (P's loads shared by two output tiles) and their single-tile twins."""
    from engine.codegen.library import longk_multicast_library

    shared = list(longk_multicast_library(layout))
    twins = [replace(c, multicast=1) for c in shared]
    return twins + shared


def longk_send_configs(layout: Layout) -> list[Any]:
    """The send-reduction twins of the longk winners (registers into the owners' shared memory,
    no cluster barrier after the main loop) and their pull twins."""
    from engine.codegen.library import longk_send_library

    sent = list(longk_send_library(layout))
    return [replace(c, reduce="pull") for c in sent] + sent


def longk_swapwide_configs(layout: Layout) -> list[Any]:
    """Swapped longk tiles 128 and 256 wide at 4, 8 and 16 splits, reduced by pull."""
    from engine.codegen.longk import LongKConfig

    configs = [
        LongKConfig(layout=layout, tile_n=width, stages=stages, splits=splits, swap=True)
        for width, stage_counts in SWAPWIDE_TILES
        for stages in stage_counts
        for splits in SWAPWIDE_SPLITS
    ]
    return [c for c in configs if c.is_valid()]


def longk_interleave_configs(layout: Layout) -> list[Any]:
    """The interleaved twins of the searched library's configs of at least 4 splits, and those
    configs."""
    from engine.codegen.library import longk_interleave_library

    dealt = list(longk_interleave_library(layout))
    return [replace(c, interleave=False) for c in dealt] + dealt


def longk_evict_configs(layout: Layout) -> list[Any]:
    """The evict-first twins (A's loads) of the searched library's configs of at least 4 splits,
    and those configs."""
    from engine.codegen.library import longk_evict_library

    hinted = list(longk_evict_library(layout))
    return [replace(c, evict_first_a=False) for c in hinted] + hinted


def sm80_cluster_configs(layout: Layout) -> list[Any]:
    """The sm80 family's deep split-K tiles reduced inside a cluster (the first baseline)."""
    return [c for c in baseline_configs(layout) if getattr(c, "reduction", "") == "cluster"]


CONFIG_SETS = {
    "baseline": baseline_configs,
    "longk": longk_configs,
    "longk-pull": longk_pull_configs,
    "longk-push": longk_push_configs,
    "longk-prefetch": longk_prefetch_configs,
    "longk-variants": longk_variant_configs,
    "longk-groups": longk_groups_configs,
    "longk-multicast": longk_multicast_configs,
    "longk-send": longk_send_configs,
    "longk-swapwide": longk_swapwide_configs,
    "longk-interleave": longk_interleave_configs,
    "longk-evict": longk_evict_configs,
    "sm80-cluster": sm80_cluster_configs,
}


def configs_of(sets: str, layout: Layout) -> list[Any]:
    configs: dict[str, Any] = {}
    for name in sets.split(","):
        for config in CONFIG_SETS[name](layout):
            configs.setdefault(config.name, config)
    return list(configs.values())


# A variant's name is its twin's with a suffix: push reduces through bulk copies, _pf prefetches
# the K slice into L2, _mc2 shares P's loads between two output tiles, _send stores the partial
# sums from registers into their owners' shared memory, _il deals the K tiles to the cluster's
# CTAs in turn, _efa loads A with an L2 evict-first policy (engine/codegen/longk.py).
VARIANT_SUFFIXES = ("_push_pf", "_pf", "_push", "_mc2", "_send", "_il", "_efa")
CHANGES = {
    "_pf": "prefetch",
    "_push": "push",
    "_mc2": "multicast",
    "_send": "send",
    "_il": "interleave",
    "_efa": "evict_first_a",
}


def twin_of(name: str) -> tuple[str, str] | None:
    """(the variant's suffix, its twin's name: the same config without that change), or None
    for a config that is nobody's variant. `_push_pf` is compared with `_push` (what prefetch
    adds to push); `_pf` with the pull config; `_push` and `_mc2` with pull."""
    if name.endswith("_push_pf"):
        return "_pf", name.removesuffix("_pf")
    for suffix in VARIANT_SUFFIXES[1:]:
        if name.endswith(suffix):
            return suffix, name.removesuffix(suffix)
    return None


def variant_ratios(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape and variant timed beside its twin: the variant's speedup over the twin's (>1:
    the change made the kernel faster), from one report's device-protocol speedups."""
    rows = []
    for shape in report.get("shapes", []):
        speedups = shape.get("speedups", {})
        for name, speedup in sorted(speedups.items()):
            if (twin := twin_of(name)) is None or twin[1] not in speedups:
                continue
            suffix, twin_name = twin
            rows.append(
                {
                    "problem": shape["problem"],
                    "variant": name,
                    "change": CHANGES[suffix],
                    "ratio": speedup / speedups[twin_name],
                }
            )
    return rows


GROUPED = re.compile(r"_cluster\d+_g\d+")


def grouped_vs_single(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape: the fastest longk config whose tile's K runs over several clusters (``_g``)
    against the fastest that keeps it in one, from one report's device-protocol speedups."""
    rows = []
    for shape in report.get("shapes", []):
        longk = {n: s for n, s in shape.get("speedups", {}).items() if n.startswith("hgemm_longk")}
        grouped = {n: s for n, s in longk.items() if GROUPED.search(n)}
        single = {n: s for n, s in longk.items() if n not in grouped}
        if grouped and single:
            best_grouped = max(grouped, key=grouped.__getitem__)
            best_single = max(single, key=single.__getitem__)
            rows.append(
                {
                    "problem": shape["problem"],
                    "grouped": best_grouped,
                    "single": best_single,
                    "ratio": grouped[best_grouped] / single[best_single],
                }
            )
    return rows


def print_variant_ratios(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("variants against their twins (speedup ratio, >1: faster with the change):")
    for row in rows:
        print(f"  {row['problem']:<18} {row['change']:<9} {row['ratio']:.3f}  {row['variant']}")


def print_grouped(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("fastest over several clusters against fastest in one (speedup ratio, >1: groups win):")
    for row in rows:
        print(f"  {row['problem']:<18} {row['ratio']:.3f}  {row['grouped']} / {row['single']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", default="baseline", help=f"from {', '.join(CONFIG_SETS)} (comma-separated)"
    )
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--layout", default="nn", choices=("nn", "tn"))
    parser.add_argument("--device-seconds", type=float, default=1.0)
    parser.add_argument("--verify-jobs", type=int, default=12, help="verifiers at once")
    parser.add_argument("--min-splits", type=int, default=1, help="skip configs with fewer")
    parser.add_argument("--compile-only", action="store_true", help="build, then stop")
    parser.add_argument("--jobs", type=int, default=2, help="compile jobs (--compile-only)")
    parser.add_argument("--out", type=Path, default=Path("longk.json"))
    parser.add_argument(
        "--compare", type=Path, help="a report of this script: print its variants' ratios, stop"
    )
    args = parser.parse_args(argv)
    if args.compare is not None:
        saved = json.loads(args.compare.read_text())
        print_variant_ratios(variant_ratios(saved))
        print_grouped(grouped_vs_single(saved))
        return 0
    unknown = [name for name in args.set.split(",") if name not in CONFIG_SETS]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}: expected from {', '.join(CONFIG_SETS)}")

    from engine.compilation.compile import compile_configs

    layout = Layout.parse(args.layout)
    configs = [c for c in configs_of(args.set, layout) if c.splits >= args.min_splits]
    problems = [Problem.parse(shape, layout) for shape in args.shapes.split(",")]
    wanted = [c for c in configs if any(c.is_valid(p) for p in problems)]
    print(f"{len(wanted)} of {len(configs)} {args.set} configs valid for some shape", flush=True)
    if args.compile_only:
        built = compile_configs(wanted, target_arch="sm_90", jobs=args.jobs)
        failed = [(c.name, b.error) for c, b in zip(wanted, built, strict=True) if not b.ok]
        print(f"{len(wanted) - len(failed)} built, {len(failed)} failed", flush=True)
        for name, error in failed:
            print(f"  {name}: {error}")
        return 1 if failed else 0

    from engine.execution.final import remeasure_batch
    from engine.gpu import cuda_driver
    from engine.verify.verifier import Verifications, new_fork_server

    built = compile_configs(wanted, target_arch=cuda_driver.local_arch())
    libraries = {c.name: b.library for c, b in zip(wanted, built, strict=True) if b.ok}
    print(f"{len(libraries)} of {len(wanted)} built", flush=True)
    jobs, verdicts = [], {}
    server, folder = new_fork_server(start=True)
    try:
        for problem in problems:
            names = [c.name for c in wanted if c.is_valid(problem) and c.name in libraries]
            batch = Verifications(
                [libraries[n] for n in names], problem, jobs=args.verify_jobs, fork_server=server
            )
            results = batch.results()
            verdicts[problem.key] = {n: r.reason for n, r in zip(names, results, strict=True)}
            ok = {n: libraries[n] for n, r in zip(names, results, strict=True) if r.ok}
            bad = [n for n, r in zip(names, results, strict=True) if not r.ok]
            print(f"{problem}: {len(ok)} of {len(names)} verified; failed: {bad[:6]}", flush=True)
            if ok:
                jobs.append((problem, ok))
    finally:
        server.close()
        folder.cleanup()
    records = remeasure_batch(
        jobs,
        protocols=("device",),
        device_seconds=args.device_seconds,
        probe_overhead=False,
        extra_baselines=(),
        heat_seconds=0.5,
    )
    shapes = []
    for (problem, _), record in zip(jobs, records, strict=True):
        if "error" in record:
            shapes.append({"problem": problem.key, "error": record["error"]})
            print(f"{problem}: {record['error'][:300]}")
            continue
        device = record["protocols"]["device"]
        speedups = {n: s[BASELINE] for n, s in device["speedups"].items()}
        ranked = sorted(speedups, key=speedups.get, reverse=True)
        shapes.append(
            {"problem": problem.key, "speedups": speedups, "ranked": ranked[:10], "record": record}
        )
        print(f"{problem}: best {speedups[ranked[0]]:.3f}x {BASELINE} ({ranked[0]})", flush=True)
        for name in ranked[:5]:
            print(f"    {speedups[name]:.3f}  {name}")
        families = {}
        for name in ranked:
            family = name.split("_")[1]
            families.setdefault(family, (name, speedups[name]))
        for family, (name, s) in families.items():
            print(f"    best {family}: {s:.3f} {name}")
    report = {
        "what": "split-K kernels on long-K, few-tile shapes vs cuBLASLt-autotune",
        "set": args.set,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "baseline": BASELINE,
        "protocol": "device (finals child, several shapes per process, L2 flushed, median)",
        "environment": records[0].get("environment") if records else None,
        "verdicts": verdicts,
        "shapes": shapes,
    }
    report["variants"] = variant_ratios(report)
    print_variant_ratios(report["variants"])
    report["grouped"] = grouped_vs_single(report)
    print_grouped(report["grouped"])
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
