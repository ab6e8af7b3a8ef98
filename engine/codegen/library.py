"""Curated config libraries: the pruned spaces we prebuild, sweep densely and search first.

The full family spaces hold hundreds of thousands of configs; compiling one costs 35–70 s of a
CPU core. A library is a few hundred configs chosen from what CUTLASS's and cuBLAS's own Hopper
kernels use (tiles of 64–256 with K 64 or 128, clusters of one or two CTAs, cooperative or
ping-pong schedules, both epilogues, persistent or stream-K scheduling) and, for the sm80 family,
the tile/warp/stage/split combinations that keep the CTA busy on small and skinny problems. Every
member passes its family's ``is_valid``; the library only narrows, it never widens.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from engine.codegen.base import KernelConfig
from engine.codegen.longk import TILE_M as TILE_ROWS
from engine.codegen.longk import LongKConfig
from engine.codegen.sm80 import Sm80Config
from engine.codegen.sm90 import Sm90Config
from engine.codegen.triton import TritonConfig, inductor_configs
from engine.problem import Layout, Problem

SM90_COOP_TILES = ((128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (128, 64, 64))
SM90_PINGPONG_TILES = ((64, 128, 64), (64, 256, 64), (128, 128, 64), (128, 64, 64), (64, 64, 128))
SM90_CLUSTERS = ((1, 1), (2, 1), (1, 2))
SM90_EPILOGUES = ("tma", "nosmem")
# (scheduler, decomposition, splits) for the cooperative kernel
SM90_COOP_SCHEDULERS = (
    ("persistent", "heuristic", 1),
    ("streamk", "heuristic", 1),
    ("streamk", "splitk", 2),
)
SM90_SWIZZLED_TILES = ((128, 256, 64), (256, 128, 64))  # large tiles also with raster N, swizzle 8
# The ping-pong 128×128×64 kernel won 8 of the 9 large NN shapes of the 64-shape campaign that
# stay under 0.98× cuBLASLt-autotune (0.875–0.971), always with the scheduler's own raster order
# and no swizzle, the only ones the library offered it. Large problems overflow the L2 (at
# 8192², A and B are 128 MB each), where the order of the output tiles decides how often A's
# and B's tiles are fetched again.
SM90_SWIZZLED_PINGPONG_TILE = (128, 128, 64)
SM90_PINGPONG_RASTERS = ("m", "n")
SM90_PINGPONG_SWIZZLES = (2, 4, 8)
# Deep split-K on Hopper's own kernel for small M·N with a long K: on the sm80 family 16 splits
# took 128×128×12288 from 0.42× to 0.77× cuBLASLt-autotune (bench/results/2026-12-04-h200-run12),
# with a second kernel for the reduction; CUTLASS's stream-K scheduler reduces in the kernel
# (bench/NOTES.md §15).
SM90_DEEP_SPLIT_TILES = ((128, 64, 64), (128, 128, 64))
SM90_DEEP_SPLITS = (4, 8, 16)
# Warpgroups split along N (the cooperative kernel): cuBLASLt-autotune's 192×192 tile on
# 16384×12288×512, the worst of the large shapes (0.875×, bench/results/2026-12-05-h200-run14),
# where our best was a 128×128 ping-pong; the heuristic's 128×320 on 16384×4096×8192 (0.971×); and
# 128×256, the tile cuBLASLt runs on the short-K wide shapes, split the other way.
SM90_SPLIT_N_TILES = ((192, 192, 64), (128, 320, 64), (128, 256, 64))
# Tiles M below 64 (the transposed problem: the wgmma's M runs along N): cuBLASLt-autotune's
# tiles on 13 of the 80 grid problems are 8–48 rows (bench/results/2026-12-05-h200-run14 finals),
# where the library had only the sm80 family's mma.sync kernels. Ping-pong 64-wide, and 32×128
# cooperative with stream-K's split-K for the long-K ones (cuBLASLt: 32×64 with 9–12 splits on
# 128×128×12288/16384). The family offers 16, 32 and 48 rows: CUTLASS 4.2 does not build 8 (NN) or
# 24 (TN) here.
SM90_TRANSPOSED_TILES = ((16, 64, 64), (32, 64, 64), (48, 64, 64))
# A 64x128 (ping-pong) or 128x128 (cooperative) TMA epilogue tile instead of the builder's 32
# columns: a quarter of the epilogue's steps (store, fence, barrier) where they dominate, on the
# short-K wide shapes (K 64–512, 0.90–0.95× in bench/results/2026-12-05-h200-run14), for the tiles
# that won or that cuBLASLt runs there.
SM90_WIDE_EPILOGUE_TILES = (((128, 128, 64), "pingpong"), ((128, 256, 64), "coop"))
# Odd tile N (96, 160; 192 outside the split-N kernel) where cuBLASLt's 64/128/256-wide tiles
# quantise a shape into a partial wave: at 512×3168, 128×96 tiles make 4 × 33 = 132, one per SM
# of an H100, where 128×128 make 4 × 25 = 100 (a quarter of the SMs idle, the last column of tiles
# three-quarters full). They compile for sm_90a without spills (168 registers, NN and TN, both
# epilogues). Appended last, so that the configs before them keep their order (spread subsets).
SM90_ODD_N_TILES = (
    ((128, 96, 64), "coop"),
    ((128, 160, 64), "coop"),
    ((128, 192, 64), "coop"),
    ((64, 96, 64), "pingpong"),
    ((64, 160, 64), "pingpong"),
    ((64, 192, 64), "pingpong"),
)
SM90_ODD_N_CLUSTERS = ((1, 1), (2, 1))
SM90_TRANSPOSED_SPLIT_TILE = (32, 128, 64)
SM90_TRANSPOSED_SPLITS = (8, 16)

SM80_TILES = (
    # tile M, N, K, warps M, N
    (64, 64, 64, 2, 2),
    (64, 128, 32, 2, 2),
    (128, 64, 32, 2, 2),
    (128, 128, 32, 2, 2),
    (128, 128, 64, 2, 2),
    (128, 256, 32, 2, 4),
    (256, 128, 32, 4, 2),
    (32, 128, 64, 1, 4),
    (64, 256, 32, 1, 4),
    (32, 64, 64, 1, 2),
)
SM80_STAGES = (3, 4)
SM80_SPLITS = (1, 2, 4)
# Deep split-K for small M·N with a long K: at 128×128×12288 the best library kernel reached only
# 0.42× cuBLASLt-autotune with ≤ 4 splits (8 CTAs of 32×64 for 132 SMs;
# bench/results/2026-12-04-h200-run11).
SM80_DEEP_SPLIT_TILES = ((32, 64, 64, 1, 2), (64, 64, 64, 2, 2), (32, 128, 64, 1, 4))
SM80_DEEP_SPLITS = (8, 16, 32)
# The same deep tiles with the split reduction fused (sm_90, bench/NOTES.md §18): launched with
# programmatic dependent launch, or reduced inside a cluster of the tile's splits (at most 16
# CTAs). The 12 shapes that hold 64 % of the 64-shape campaign's loss are split-K shapes whose
# kernels take 12–26 µs, where a second launch is a visible share. Two splits are for the
# mid-size shapes that lose with one (128×4096×2048: 128 CTAs of 64×64 on 132 SMs, 0.73×).
SM80_FUSED_SPLITS = {"pdl": (2, 4, 8, 16, 32), "cluster": (2, 4, 8, 16)}


def sm90_library(layout: Layout) -> list[Sm90Config]:
    def config(tile, cluster, schedule, epilogue, **knobs) -> Sm90Config:
        (tm, tn, tk), (cm, cn) = tile, cluster
        return Sm90Config(
            layout=layout,
            tile_m=tm,
            tile_n=tn,
            tile_k=tk,
            cluster_m=cm,
            cluster_n=cn,
            schedule=schedule,
            epilogue=epilogue,
            **knobs,
        )

    configs: list[Sm90Config] = []
    for tile, cluster, epilogue in itertools.product(
        SM90_COOP_TILES, SM90_CLUSTERS, SM90_EPILOGUES
    ):
        for scheduler, decomposition, splits in SM90_COOP_SCHEDULERS:
            configs.append(
                config(
                    tile,
                    cluster,
                    "coop",
                    epilogue,
                    scheduler=scheduler,
                    decomposition=decomposition,
                    splits=splits,
                )
            )
        if tile in SM90_SWIZZLED_TILES:
            configs.append(config(tile, cluster, "coop", epilogue, raster="n", swizzle=8))
    for tile, cluster, epilogue in itertools.product(
        SM90_PINGPONG_TILES, SM90_CLUSTERS, SM90_EPILOGUES
    ):
        configs.append(config(tile, cluster, "pingpong", epilogue))
    for cluster, raster, swizzle in itertools.product(
        SM90_CLUSTERS, SM90_PINGPONG_RASTERS, SM90_PINGPONG_SWIZZLES
    ):
        configs.append(
            config(
                SM90_SWIZZLED_PINGPONG_TILE,
                cluster,
                "pingpong",
                "tma",
                raster=raster,
                swizzle=swizzle,
            )
        )
    split_k = itertools.chain(
        itertools.product(SM90_DEEP_SPLIT_TILES, SM90_DEEP_SPLITS),
        itertools.product([SM90_TRANSPOSED_SPLIT_TILE], SM90_TRANSPOSED_SPLITS),
    )
    for tile, splits in split_k:
        configs.append(
            config(
                tile,
                (1, 1),
                "coop",
                "tma",
                scheduler="streamk",
                decomposition="splitk",
                splits=splits,
            )
        )
    for tile, cluster in itertools.product(SM90_SPLIT_N_TILES, SM90_CLUSTERS):
        configs.append(config(tile, cluster, "coop", "tma", warpgroups="n"))
    for tile, cluster in itertools.product(SM90_TRANSPOSED_TILES, SM90_CLUSTERS):
        configs.append(config(tile, cluster, "pingpong", "tma"))
    for (tile, schedule), cluster in itertools.product(SM90_WIDE_EPILOGUE_TILES, SM90_CLUSTERS):
        configs.append(config(tile, cluster, schedule, "tma", epilogue_n=128))
    for (tile, schedule), cluster in itertools.product(SM90_ODD_N_TILES, SM90_ODD_N_CLUSTERS):
        configs.append(config(tile, cluster, schedule, "tma"))
    return [c for c in configs if c.is_valid()]


def sm80_library(layout: Layout) -> list[Sm80Config]:
    def config(tile, stages: int, splits: int, reduction: str = "kernel") -> Sm80Config:
        tm, tn, tk, wm, wn = tile
        return Sm80Config(
            layout=layout,
            tile_m=tm,
            tile_n=tn,
            tile_k=tk,
            warp_m=wm,
            warp_n=wn,
            stages=stages,
            splits=splits,
            reduction=reduction,
        )

    configs = [
        config(tile, stages, splits)
        for tile, stages, splits in [
            *itertools.product(SM80_TILES, SM80_STAGES, SM80_SPLITS),
            *itertools.product(SM80_DEEP_SPLIT_TILES, (4,), SM80_DEEP_SPLITS),
        ]
    ]
    configs += [
        config(tile, 4, splits, reduction)
        for reduction, fused_splits in SM80_FUSED_SPLITS.items()
        for tile, splits in itertools.product(SM80_DEEP_SPLIT_TILES, fused_splits)
    ]
    return [c for c in configs if c.is_valid(None, "sm_90")]


# Triton: every config torch Inductor's max-autotune tries on a problem of CUDA-L2's grid (its mm
# configs scaled to the problem: 44 in all), so the family never lacks what Inductor picks; then
# what Inductor does not try. Split-K reduced by the tile's last split (one launch) for small
# M·N with a long K, with tiles whose count times the splits fills 132 SMs about once;
# Inductor's persistent TMA configs (off by default in Inductor); and lean tiles for the
# latency-bound problems (under ~15 µs): few warps, a deep pipeline, and no group-M reordering
# where one wave covers the problem.
TRITON_GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
TRITON_SPLIT_TILES = (
    (32, 32, 128, 3, 4),
    (64, 32, 128, 4, 4),
    (64, 64, 64, 4, 4),
    (64, 64, 128, 3, 4),
)
TRITON_SPLITS = (2, 4, 8, 16)
TRITON_PERSISTENT_TMA = (
    (128, 256, 64, 3, 8),
    (128, 128, 64, 3, 8),
    (128, 128, 128, 3, 8),
    (128, 128, 128, 3, 4),
    (128, 128, 64, 4, 8),
    (128, 128, 64, 5, 8),
    (256, 128, 64, 4, 8),
    (128, 128, 64, 5, 4),
)
TRITON_LEAN_TILES = (
    (16, 64, 128, 4, 4),
    (32, 64, 64, 4, 4),
    (32, 64, 128, 3, 4),
    (64, 32, 64, 4, 4),
    (64, 64, 64, 2, 4),
    (64, 64, 128, 2, 4),
    (64, 128, 64, 3, 4),
    (128, 64, 64, 3, 4),
)


def triton_library(layout: Layout) -> list[TritonConfig]:
    def config(tile, **knobs) -> TritonConfig:
        tm, tn, tk, stages, warps = tile
        knobs.setdefault("even_k", knobs.get("loads", "pointer") == "pointer")
        return TritonConfig(
            layout=layout, tile_m=tm, tile_n=tn, tile_k=tk, stages=stages, warps=warps, **knobs
        )

    configs: dict[str, TritonConfig] = {}
    for m, n, k in itertools.product(TRITON_GRID, repeat=3):
        for c in inductor_configs(Problem(m, n, k, layout)):
            configs.setdefault(c.name, c)
    extra = [
        *(config(t, splits=s) for t, s in itertools.product(TRITON_SPLIT_TILES, TRITON_SPLITS)),
        *(config((64, 64, 64, 4, 4), splits=s, loads="tma") for s in TRITON_SPLITS),
        *(config(t, schedule="persistent", loads="tma") for t in TRITON_PERSISTENT_TMA),
        *(config(t, group_m=g) for t, g in itertools.product(TRITON_LEAN_TILES, (1, 8))),
    ]
    for c in extra:
        configs.setdefault(c.name, c)
    return [c for c in configs.values() if c.is_valid()]


# Cluster split-K for long K and few output tiles (engine/codegen/longk.py): tiles 64 x 16…256
# with 2–16 splits, so that tiles × splits covers the 132 SMs about once on the long-K shapes
# (128×128: 64×32 tiles × 16 splits = 128 CTAs; 512×256: 64×64 × 4 or 64×128 × 8), at two
# pipeline depths; swapped (M on the wgmma N side) for tiles 16–64 wide, for M below 64.
LONGK_TILES = (16, 32, 64, 128, 256)
LONGK_SPLITS = (2, 4, 8, 16)
LONGK_STAGES = (4, 6)
LONGK_SWAPPED_TILES = (16, 32, 64)
# The first H100 run (bench/results/2026-12-06-h100-longk, NOTES §27): every shape's best had 6
# stages, 3–10 % ahead of the same tile with 4. Deeper pipelines, and the shallow ones padded to
# one CTA an SM (more SMs streaming, the same bytes in flight per CTA).
LONGK_DEEP_TILES = (32, 64, 128)
LONGK_DEEP_STAGES = (8, 12)
LONGK_DEEP_SPLITS = (4, 8, 16)


# The push reduction (bulk DSMEM copies, engine/codegen/longk.py) for the tilings that won a
# shape on the second H100 call (bench/NOTES.md §30), as (tile_n, stages, splits), unpadded; and
# for the swapped tile of the same width and splits (the library swaps at 4 stages only), so that
# the swapped partial tile's layout is covered too. Out of the searched library (and so out of
# campaigns, the seed's prior and the fresh replay's frozen subset): on an H100 it verified and
# tied its pull twin (geomean 1.005, bench/results/2026-12-06-h100-longk-3), so it adds configs
# without adding speed. bench/longk_bench.py --set longk-push.
LONGK_PUSH_TILINGS = ((64, 8, 16), (128, 8, 4), (128, 8, 8), (64, 8, 8), (64, 12, 8), (64, 6, 8))


def takes_push(config: LongKConfig) -> bool:
    if config.ctas_per_sm or config.reduce != "pull":
        return False
    if config.swap:
        return (config.tile_n, config.splits) in {(t, s) for t, _, s in LONGK_PUSH_TILINGS}
    return (config.tile_n, config.stages, config.splits) in LONGK_PUSH_TILINGS


# The send reduction in place of pull for unswapped tiles at most 64 wide. On an H100 every 64-wide
# unswapped send config was at least as fast as its pull twin on each of the six long-K shapes
# (23 pairs, geomean 1.034, 1.000–1.112), while the 128-wide ones ran at 0.954 and the swapped
# 64-wide at 0.990 of their twins (bench/results/2026-12-07-h100-longk-send). The whole library
# against its pull twin on the next call: 16 wide 1.073, 32 wide 1.060, 64 wide 1.032 (288 pairs,
# 14 below 0.98); each shape's best 1.000–1.123× the pull library's best
# (bench/results/2026-12-07-h100-longk-library).
LONGK_SEND_MAX_TILE = 64


def takes_send(config: LongKConfig) -> bool:
    return (
        config.reduce == "pull"
        and not config.swap
        and config.tile_n <= LONGK_SEND_MAX_TILE
        and config.groups == 1
        and config.multicast == 1
        and not config.prefetch
    )


def longk_library(layout: Layout) -> list[LongKConfig]:
    """The searched longk configs: the pull library with send in place of pull where it won."""
    return [
        sent if takes_send(c) and (sent := dataclasses.replace(c, reduce="send")).is_valid() else c
        for c in longk_pull_library(layout)
    ]


def longk_pull_library(layout: Layout) -> list[LongKConfig]:
    """Every longk tiling reduced by pull, the twin libraries' base."""
    configs = [
        LongKConfig(layout=layout, tile_n=tile, stages=stages, splits=splits, swap=swap)
        for tile, splits, stages, swap in itertools.product(
            LONGK_TILES, LONGK_SPLITS, LONGK_STAGES, (False, True)
        )
        if not swap or (tile in LONGK_SWAPPED_TILES and stages == LONGK_STAGES[0])
    ]
    configs += [
        LongKConfig(layout=layout, tile_n=tile, stages=stages, splits=splits)
        for tile, splits, stages in itertools.product(
            LONGK_DEEP_TILES, LONGK_DEEP_SPLITS, LONGK_DEEP_STAGES
        )
    ]
    configs += [
        LongKConfig(layout=layout, tile_n=tile, stages=stages, splits=splits, ctas_per_sm=1)
        for tile, splits, stages in itertools.product(
            LONGK_DEEP_TILES, LONGK_DEEP_SPLITS, LONGK_STAGES
        )
    ]
    return [c for c in configs if c.is_valid()]


def longk_push_library(layout: Layout) -> list[LongKConfig]:
    """The push twins of the library's pull configs that LONGK_PUSH_TILINGS names."""
    return [
        push
        for c in longk_pull_library(layout)
        if takes_push(c) and (push := dataclasses.replace(c, reduce="push")).is_valid()
    ]


def longk_send_library(layout: Layout) -> list[LongKConfig]:
    """The send twins (``reduce="send"``: accumulators stored from registers into their owners'
    shared memory, no cluster barrier after the main loop) of the pull configs LONGK_PUSH_TILINGS
    names (the searched library holds those LONGK_SEND_MAX_TILE allows), beside their pull twins in
    bench/longk_bench.py --set longk-send."""
    return [
        sent
        for c in longk_pull_library(layout)
        if takes_push(c) and (sent := dataclasses.replace(c, reduce="send")).is_valid()
    ]


def longk_prefetch_library(layout: Layout) -> list[LongKConfig]:
    """The L2-prefetching twins (``prefetch=True``) of the pull configs LONGK_PUSH_TILINGS names
    and of their push twins, outside the searched library: on an H100 they ran 10 % slower than
    their twins (geomean 0.899, bench/results/2026-12-06-h100-longk-3). bench/longk_bench.py
    --set longk-prefetch."""
    pulled = [c for c in longk_pull_library(layout) if takes_push(c)]
    return [
        prefetching
        for c in [*pulled, *longk_push_library(layout)]
        if (prefetching := dataclasses.replace(c, prefetch=True)).is_valid()
    ]


# multicast = 2: the two CTAs of neighbouring output tiles along Q that run the same K slice
# share P's loads (each loads half of P's K tile into both, by TMA multicast), so that each byte of
# P crosses L2 once where the single-tile kernels read it twice. The cluster holds both tiles'
# splits, so only tilings of at most 8 splits take it: the twins of the H100 winners that do.
# Out of the searched library until measured. bench/longk_bench.py --set longk-multicast.
LONGK_MULTICAST_TILINGS = (
    (128, 8, 4),
    (128, 8, 8),
    (64, 8, 8),
    (64, 12, 8),
    (64, 6, 8),
    (32, 8, 8),
)


def longk_multicast_library(layout: Layout) -> list[LongKConfig]:
    """The multicast twins of the library's pull configs that LONGK_MULTICAST_TILINGS names."""
    tilings = set(LONGK_MULTICAST_TILINGS)
    return [
        shared
        for c in longk_pull_library(layout)
        if not c.ctas_per_sm
        and c.reduce == "pull"
        and (c.tile_n, c.stages, c.splits) in tilings
        and (shared := dataclasses.replace(c, multicast=2)).is_valid()
    ]


# The twins of the searched library's configs of at least 4 splits with one change each, out of
# the searched library:
# - interleave: a cluster's CTAs take K tiles in turn instead of one contiguous slice each, so
#   that their loads of one moment lie side by side along A's rows (longer DRAM runs on the
#   A-streaming M ≫ N shapes). Unmeasured. bench/longk_bench.py --set longk-interleave.
# - evict_first_a: A's loads carry an L2 evict-first policy, so that A, read once, gives up its
#   lines before B's (re-read along M) and before the dirty lines a previous kernel left (written
#   back to DRAM before their place is taken). On an H100 it was 1.03-1.08x its twin after the
#   device protocol's zeroing flush and 0.96-1.01x after a reading one
#   (bench/results/2026-12-08-h100-longk-flush): a gain the benchmark's dirty L2 makes, not the
#   kernel. bench/longk_bench.py --set longk-evict.
LONGK_TWIN_MIN_SPLITS = 4


def longk_searched_twins(layout: Layout, **change: object) -> list[LongKConfig]:
    """The searched configs of at least LONGK_TWIN_MIN_SPLITS splits with ``change`` applied,
    where the changed config is valid."""
    return [
        twin
        for c in longk_library(layout)
        if c.splits >= LONGK_TWIN_MIN_SPLITS
        and (twin := dataclasses.replace(c, **change)).is_valid()
    ]


def longk_interleave_library(layout: Layout) -> list[LongKConfig]:
    return longk_searched_twins(layout, interleave=True)


def longk_evict_library(layout: Layout) -> list[LongKConfig]:
    return longk_searched_twins(layout, evict_first_a=True)


# groups > 1: a tile's K over several small clusters, summed across them in the workspace (the
# last cluster to arrive sums), so that a tile gets more CTAs than one cluster holds. Out of the
# searched library: on an H100 every one verified and every one was slower than the best
# single-cluster config (geomean 0.80 of it over the six long-K shapes; each group added costs
# more), bench/results/2026-12-06-h100-longk-groups. bench/longk_bench.py --set longk-groups.
LONGK_GROUPS_TILES = (32, 64, 128)
LONGK_GROUPS_CLUSTERS = (4, 8)
LONGK_GROUPS = (2, 4, 8)
LONGK_GROUPS_STAGES = 8


def longk_groups_library(layout: Layout) -> list[LongKConfig]:
    configs = [
        LongKConfig(
            layout=layout, tile_n=tile, stages=LONGK_GROUPS_STAGES, splits=splits, groups=groups
        )
        for tile, splits, groups in itertools.product(
            LONGK_GROUPS_TILES, LONGK_GROUPS_CLUSTERS, LONGK_GROUPS
        )
    ]
    return [c for c in configs if c.is_valid()]


# The family's own picks for a problem, for proposers that seed a shape's first round with each
# family's prior (as Inductor's heuristic configs are Triton's). From the first H100 run
# (bench/results/2026-12-06-h100-longk): the fastest config of each of the six shapes had
# 64–128 CTAs, 64-wide tiles on five of six, 6 stages on all six, and at least 512 K a split.
LONGK_PRIOR_CTAS = (64, 128)
LONGK_PRIOR_TILE = 64
LONGK_PRIOR_STAGES = 8
LONGK_PRIOR_MIN_K_PER_SPLIT = 512


def longk_prior(problem: Problem, count: int = 4) -> list[LongKConfig]:
    """Up to ``count`` longk library configs valid for ``problem``, each of another tiling (tile
    and splits), that the H100 runs' winners resemble most: tiles × splits in 64–128 CTAs, a
    64-wide tile (swapped: the narrowest that holds M), 8 stages (the second run's best on four
    of six shapes, 3–9 % ahead of 6), the most splits that leave ≥ 512 K each; swapped only when
    M is below 64."""
    low, high = LONGK_PRIOR_CTAS
    swapped_width = max(16, 1 << max(problem.m - 1, 1).bit_length())

    def rank(config: LongKConfig) -> tuple[float, ...]:
        tm, tn = config.tile_mn()
        ctas = -(-problem.m // tm) * -(-problem.n // tn) * config.splits
        outside = max(math.log2(low / ctas), math.log2(ctas / high), 0.0)
        thin_split = problem.k / config.splits < LONGK_PRIOR_MIN_K_PER_SPLIT
        width = swapped_width if config.swap else LONGK_PRIOR_TILE
        return (
            outside,
            float(thin_split),
            float(config.swap != (problem.m < TILE_ROWS)),
            abs(math.log2(config.tile_n / width)),
            float(config.stages != LONGK_PRIOR_STAGES),
            float(config.ctas_per_sm != 0),
            -config.splits,
        )

    picks: dict[tuple[int, int, int], LongKConfig] = {}
    valid = [c for c in longk_library(problem.layout) if c.is_valid(problem)]
    for config in sorted(valid, key=rank):
        picks.setdefault((*config.tile_mn(), config.splits), config)
    return list(picks.values())[:count]


LIBRARIES = {
    "sm90": sm90_library,
    "sm80": sm80_library,
    "triton": triton_library,
    "longk": longk_library,
}


def library(family: str, layout: Layout, limit: int | None = None) -> list[KernelConfig]:
    """The curated configs of ``family`` for ``layout`` (KeyError for an unknown family).

    ``limit`` keeps that many, spread evenly over the library's order (so a subset still covers
    tiles, clusters and schedules); the same limit always gives the same configs.
    """
    try:
        make = LIBRARIES[family]
    except KeyError:
        known = sorted(LIBRARIES)
        raise KeyError(f"no library for family {family!r}: expected one of {known}") from None
    configs = list(make(layout))
    if limit is None or limit >= len(configs):
        return configs
    return [configs[i * len(configs) // limit] for i in range(max(0, limit))]
