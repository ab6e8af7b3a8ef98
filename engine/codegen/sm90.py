"""Family sm90: CUTLASS 3.x collective-builder GEMMs for Hopper (TMA + WGMMA, sm_90a).

Knobs: CTA tile M×N×K, cluster shape, kernel schedule (``ws`` TMA warp-specialized, ``coop``
cooperative, ``pingpong``), epilogue (``tma`` warp-specialized TMA store, ``nosmem`` direct
stores), mainloop stages (0 = as many as fit), tile scheduler (``persistent`` or ``streamk`` with
a decomposition mode and split count), raster order, max swizzle, how the cooperative
schedule's two consumer warpgroups share the tile (``warpgroups``: ``m``, CUTLASS's builder, each
takes half the rows; ``n``, each takes half the columns), and the TMA epilogue tile's N
(``epilogue_n``: 0, the builder's 32; or 128, a quarter of the epilogue's steps a tile).

Legality (``is_valid``) is conservative: combinations CUTLASS rejects statically (stream-K on
ping-pong or basic warp-specialized kernels), that spill by construction (more than 160 fp32
accumulators per consumer thread) or that do not fit shared memory are invalid; so are ones we have
not convinced ourselves of (tile M above 128 outside cooperative, cluster dims above 2, N tiles
other than 64/128/176/192/256/320). Tile N 192 is one of cuBLASLt's tiles (its "192x128" is our
128×192); it fits 128×192 cooperative and 64×192 ping-pong (96 accumulators a thread). Both
compile for sm_90a without spills in NN and TN, TMA and direct-store epilogues, persistent and
stream-K split-K (168 registers).

Split along N (``warpgroups="n"``), the cooperative kernel takes tiles CUTLASS's builder does not:
cuBLASLt-autotune's 192×192 on 16384×12288×512 (each warpgroup 192×96: three 64×96 wgmma atoms,
144 accumulators a thread) and the heuristic's 128×320 on 16384×4096×8192 (two 64×160 atoms, 160
accumulators); both compile without spills. The builder still gives every part but the tiled MMA
and the B and D swizzle atoms, which are chosen for a half's width
(templates/sm90_mainloop_split_n.cu.tmpl and sm90_epilogue_split_n.cu.tmpl).

A tile M below 64 (16, 32, 48) runs the transposed problem: CUTLASS computes C^T = B^T·A^T, whose
column-major D is C's row-major memory, so that the wgmma's fixed 64 rows run along N and tile M
is the wgmma's N. cuBLASLt runs such tiles (8 to 48 rows) on 13 of the 64-shape campaign's 80
problems. The config's tile, cluster and raster order stay in C's orientation; the source
renders CUTLASS's (:attr:`Sm90Config.mma_tile`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from string import Template
from typing import ClassVar

from engine.codegen.base import VALID, KernelConfig, Validity, invalid, load_template
from engine.problem import Layout, Problem

SMEM_LIMIT = 232448  # bytes of shared memory per block on H100/H200 (227 KiB)
SMEM_RESERVED = 1024  # pipeline barriers, tile-scheduler storage
EPILOGUE_SMEM = {"tma": 32768, "nosmem": 0}  # upper bound of the epilogue's smem (fp16 D, no C)
# fp32 accumulator registers per consumer thread. The cooperative kernel gives its consumers 232
# registers (setmaxnreg); 144 (192×192 split along N) and 160 (128×320) compile for sm_90a
# without spills.
MAX_ACCUMULATORS = 160
# Tile N for warpgroups split along N: each half (64, 96, 128, 160) is a whole number of the B
# operand's swizzle atoms (160: 5 of 32), and a wgmma N (160 with CUTLASS's extended shapes).
SPLIT_N_TILE_N = frozenset({128, 192, 256, 320})
EPILOGUE_TILE_M_SPLIT_N = 64  # rows of an epilogue tile when the warpgroups split N
MMA_M = 64  # rows of a wgmma: a smaller tile M runs the transposed problem (Sm90Config.swapped)
# Tile N of the transposed problem's tiles: one or two wgmma M (cuBLASLt's 8- to 48-row tiles are
# all 64 wide); wider ones would be as many accumulators for fewer rows. Tile M 8 (NN) and 24 (TN)
# fail to compile with CUTLASS 4.2 (a TMA layout's divisibility): SPACE offers 16, 32 and 48.
TRANSPOSED_TILE_N = frozenset({64, 128})
RASTER_TRANSPOSED = {"heuristic": "heuristic", "m": "n", "n": "m"}
# The wgmma N that CUTLASS offers by default; the others (multiples of 8 up to 256) only with
# CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED. Without it a 176-wide tile is eleven 64x16x16
# instructions per k-step instead of one 64x176x16. Defined only where needed: every other
# kernel's source, and so its cache key, is unchanged.
DEFAULT_MMA_N = frozenset({8, 16, 32, 64, 96, 128, 192, 256})
EXTENDED_MMA_DEFINE = (
    "// ${tile}: CUTLASS selects its 64x${mma_n}x16 wgmma only with the extended shapes\n"
    "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n"
)

KERNEL_SCHEDULES = {
    "ws": "cutlass::gemm::KernelTmaWarpSpecialized",
    "coop": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
}
RASTER = {"heuristic": "Heuristic", "m": "AlongM", "n": "AlongN"}
DECOMPOSITION = {
    "heuristic": "Heuristic",
    "dataparallel": "DataParallel",
    "splitk": "SplitK",
    "streamk": "StreamK",
}


@dataclass(frozen=True)
class Sm90Config(KernelConfig):
    FAMILY: ClassVar[str] = "sm90"
    ARCHS: ClassVar[tuple[str, ...]] = ("sm_90a",)
    TEMPLATE: ClassVar[str] = "sm90.cu.tmpl"
    SPACE: ClassVar[dict[str, tuple[object, ...]]] = {
        "tile_m": (16, 32, 48, 64, 128, 192, 256),
        "tile_n": (64, 96, 128, 160, 176, 192, 256, 320),
        "tile_k": (32, 64, 128),
        "cluster_m": (1, 2),
        "cluster_n": (1, 2),
        "schedule": ("ws", "coop", "pingpong"),
        "epilogue": ("tma", "nosmem"),
        "stages": (0, 2, 3, 4, 5, 6, 7),
        "scheduler": ("persistent", "streamk"),
        "decomposition": ("heuristic", "dataparallel", "splitk", "streamk"),
        "splits": (1, 2, 3, 4, 8, 16),
        "raster": ("heuristic", "m", "n"),
        "swizzle": (1, 2, 4, 8),
        "warpgroups": ("m", "n"),
        "epilogue_n": (0, 128),
    }

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "coop"
    epilogue: str = "tma"
    stages: int = 0  # 0: as many as fit beside the epilogue
    scheduler: str = "persistent"
    decomposition: str = "heuristic"  # stream-K only
    splits: int = 1  # stream-K split-K only
    raster: str = "heuristic"
    swizzle: int = 1
    warpgroups: str = "m"  # coop only: the consumer warpgroups split the tile along M or N
    epilogue_n: int = 0  # TMA epilogue tile N; 0: CUTLASS's (32), and its M is the builder's

    @classmethod
    def candidates(cls, layout: Layout) -> Iterator[Sm90Config]:
        """SPACE without the scheduler combinations that are invalid for every config, and
        without the tiles that the schedule or the epilogue tile cannot take (in SPACE's
        order)."""
        schedulers = [("persistent", "heuristic", 1)]
        schedulers += [("streamk", d, 1) for d in ("heuristic", "dataparallel", "streamk")]
        schedulers += [("streamk", "splitk", s) for s in cls.SPACE["splits"] if s > 1]
        keys = [k for k in cls.SPACE if k not in ("scheduler", "decomposition", "splits")]
        for values in itertools.product(*(cls.SPACE[k] for k in keys)):
            knobs = dict(zip(keys, values, strict=True))
            tile = (knobs["tile_m"], knobs["tile_n"])
            if not tile_validity(*tile, knobs["schedule"], knobs["warpgroups"]):
                continue
            epilogue = (knobs["epilogue"], knobs["warpgroups"], knobs["epilogue_n"])
            if not epilogue_tile_validity(*tile, *epilogue):
                continue
            for scheduler, decomposition, splits in schedulers:
                yield cls(
                    layout=layout,
                    scheduler=scheduler,
                    decomposition=decomposition,
                    splits=splits,
                    **knobs,
                )

    # -- legality --------------------------------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        if not (in_space := self.within_space()):
            return in_space
        if arch is not None and arch not in ("sm_90a",):
            return invalid(f"sm90 kernels need sm_90a (wgmma, TMA), not {arch}")
        if not (shape := tile_validity(self.tile_m, self.tile_n, self.schedule, self.warpgroups)):
            return shape
        if self.scheduler == "streamk" and self.schedule != "coop":
            return invalid(
                "CUTLASS supports the stream-K scheduler only with the cooperative kernel"
            )
        if self.scheduler == "persistent" and (
            self.decomposition != "heuristic" or self.splits != 1
        ):
            return invalid("decomposition and splits apply to the stream-K scheduler only")
        if self.decomposition == "splitk" and self.splits < 2:
            return invalid("split-K decomposition needs splits ≥ 2")
        if self.decomposition != "splitk" and self.splits != 1:
            return invalid("splits > 1 is the split-K decomposition: set decomposition=splitk")
        if self.schedule == "ws" and (self.raster != "heuristic" or self.swizzle != 1):
            return invalid("the basic warp-specialized kernel is not persistent: no raster/swizzle")
        knobs = (self.tile_m, self.tile_n, self.epilogue, self.warpgroups, self.epilogue_n)
        if not (epilogue := epilogue_tile_validity(*knobs)):
            return epilogue
        stage_bytes = self.stage_bytes
        budget = SMEM_LIMIT - SMEM_RESERVED - self.epilogue_smem
        if self.stages == 0 and budget // stage_bytes < 2:
            return invalid(f"fewer than 2 stages of {stage_bytes} B fit in shared memory")
        if self.stages and self.stages * stage_bytes > budget:
            return invalid(
                f"{self.stages} stages of {stage_bytes} B exceed the {budget} B "
                "shared-memory budget"
            )
        return self.fits(problem)

    @property
    def stage_bytes(self) -> int:
        return (self.tile_m + self.tile_n) * self.tile_k * 2

    @property
    def split_n(self) -> bool:
        return self.warpgroups == "n"

    @property
    def swapped(self) -> bool:
        """Tile M below a wgmma's 64 rows: CUTLASS computes C^T = B^T·A^T (C's row-major
        memory is C^T's column-major), so that the wgmma's M runs along N and tile M is its N."""
        return self.tile_m < MMA_M

    @property
    def mma_tile(self) -> tuple[int, int]:
        """CUTLASS's tile M×N: the transposed problem's when :attr:`swapped`."""
        return mma_tile(self.tile_m, self.tile_n)

    @property
    def mma_n(self) -> int:
        """N of the wgmma instruction: a warpgroup's share of CUTLASS's tile N."""
        return self.mma_tile[1] // 2 if self.split_n else self.mma_tile[1]

    @property
    def epilogue_tiles(self) -> int:
        """Epilogue tiles a CTA tile is stored in, with warpgroups split along N."""
        return self.mma_tile[0] // EPILOGUE_TILE_M_SPLIT_N

    @property
    def epilogue_stages_d(self) -> int:
        """D's stages in the split-N TMA epilogue: CUTLASS's 2 (at most one a tile), or 1 where
        2 would leave the mainloop fewer than 3 stages (128×320: 80 KB for 2)."""
        stages = min(self.epilogue_tiles, 2)
        tile_bytes = EPILOGUE_TILE_M_SPLIT_N * self.mma_tile[1] * 2
        mainloop = (SMEM_LIMIT - SMEM_RESERVED - stages * tile_bytes) // self.stage_bytes
        return 1 if stages == 2 and mainloop < 3 else stages

    @property
    def epilogue_tile_m(self) -> int:
        """The builder's epilogue tile M: 128 rows for the cooperative kernel, else 64."""
        return min(128 if self.schedule == "coop" else 64, self.mma_tile[0])

    @property
    def epilogue_smem(self) -> int:
        """Upper bound of the epilogue's shared memory (bytes)."""
        if self.split_n and self.epilogue == "tma":  # D's stages of a 64-row, full-width tile
            return self.epilogue_stages_d * EPILOGUE_TILE_M_SPLIT_N * self.mma_tile[1] * 2
        if self.epilogue_n:  # 2 stages of D, as the builder gives a tile of two or more
            return 2 * self.epilogue_tile_m * self.epilogue_n * 2
        return EPILOGUE_SMEM[self.epilogue]

    def tile_mn(self) -> tuple[int, int]:
        return self.tile_m, self.tile_n

    # -- naming and rendering --------------------------------------------------------------
    @property
    def name(self) -> str:
        parts = [
            "hgemm_sm90",
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}",
            f"c{self.cluster_m}x{self.cluster_n}x1",
            f"s{self.stages}" if self.stages else "sauto",
            self.layout.value,
            self.schedule,
            *(["wgn"] if self.split_n else []),
            f"epi{self.epilogue}{self.epilogue_n or ''}",
        ]
        if self.scheduler == "streamk":
            split = f"{self.splits}" if self.decomposition == "splitk" else ""
            parts.append(f"streamk_{self.decomposition}{split}")
        else:
            parts.append("persistent")
        parts.append(f"r{self.raster}_sw{self.swizzle}")
        return "_".join(parts)

    def substitutions(self) -> dict[str, str]:
        tma = self.epilogue == "tma"
        if tma:
            epilogue = (
                "cutlass::epilogue::TmaWarpSpecializedCooperative"
                if self.schedule == "coop"
                else "cutlass::epilogue::TmaWarpSpecialized"
            )
        else:
            epilogue = "cutlass::epilogue::NoSmemWarpSpecialized"
        if self.stages:
            stage_count = f"cutlass::gemm::collective::StageCount<{self.stages}>"
        else:
            stage_count = (
                "cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>("
                "sizeof(typename CollectiveEpilogue::SharedStorage))>"
            )
        streamk = self.scheduler == "streamk"
        raster = RASTER_TRANSPOSED[self.raster] if self.swapped else self.raster
        scheduler_lines = []
        if self.schedule != "ws":
            scheduler_lines += [
                "  using RasterOrder = decltype(SchedulerArguments::raster_order);",
                f"  args.scheduler.raster_order = RasterOrder::{RASTER[raster]};",
                f"  args.scheduler.max_swizzle_size = {self.swizzle};",
            ]
        if streamk:
            scheduler_lines += [
                f"  args.scheduler.splits = {self.splits};",
                "  using Decomposition = decltype(SchedulerArguments::decomposition_mode);",
                "  using Reduction = decltype(SchedulerArguments::reduction_mode);",
                f"  args.scheduler.decomposition_mode = Decomposition::"
                f"{DECOMPOSITION[self.decomposition]};",
                "  args.scheduler.reduction_mode = Reduction::Deterministic;",
            ]
        nn = self.layout is Layout.NN
        mma_m, mma_n = self.mma_tile
        cluster_m, cluster_n = (
            (self.cluster_n, self.cluster_m) if self.swapped else (self.cluster_m, self.cluster_n)
        )
        collective = {
            "tile_m": str(mma_m),
            "tile_n": str(mma_n),
            "tile_k": str(self.tile_k),
            "half_n": str(mma_n // 2),
            "atoms_m": str(mma_m // MMA_M),
            "epilogue_schedule": epilogue,
            "epilogue_tile": (
                f"Shape<_{self.epilogue_tile_m}, _{self.epilogue_n}>"
                if self.epilogue_n
                else "cutlass::epilogue::collective::EpilogueTileAuto"
            ),
            "kernel_schedule": KERNEL_SCHEDULES[self.schedule],
            "stage_count": stage_count,
            "epilogue_stages_c": str(min(self.epilogue_tiles, 4)),
            "epilogue_stages_d": str(self.epilogue_stages_d),
            "epilogue_fragment": str(EPILOGUE_TILE_M_SPLIT_N * mma_n // 256),
        }
        split_epilogue = self.split_n and tma
        parts = (
            "sm90_epilogue_split_n.cu.tmpl" if split_epilogue else "sm90_epilogue_builder.cu.tmpl",
            "sm90_mainloop_split_n.cu.tmpl" if self.split_n else "sm90_mainloop_builder.cu.tmpl",
        )
        collectives = "\n\n".join(
            load_template(part).substitute(collective).rstrip("\n") for part in parts
        )
        return {
            "extended_mma": (
                ""
                if self.mma_n in DEFAULT_MMA_N
                else Template(EXTENDED_MMA_DEFINE).substitute(
                    tile=f"tile M {self.tile_m}" if self.swapped else f"tile N {self.tile_n}",
                    mma_n=self.mma_n,
                )
            ),
            "collectives": collectives,
            "b_desc": "KxN row-major (N-major)" if nn else "NxK row-major (K-major)",
            **(self._transposed_operands() if self.swapped else self._operands()),
            # the TMA epilogue takes C = void (never read); the no-smem one reads nothing at beta 0
            "element_c": "void" if tma else "cutlass::half_t",
            "ptr_c": "nullptr",
            "tile_m": str(mma_m),
            "tile_n": str(mma_n),
            "tile_k": str(self.tile_k),
            "cluster_m": str(cluster_m),
            "cluster_n": str(cluster_n),
            "tile_scheduler": (
                "cutlass::gemm::StreamKScheduler"
                if streamk
                else "cutlass::gemm::PersistentScheduler"
            ),
            "scheduler_arguments": "\n".join(scheduler_lines),
            "needs_workspace_init": "true" if streamk else "false",
        }

    def _operands(self) -> dict[str, str]:
        """CUTLASS's A, B and D are ours: C (MxN, row-major) = A (MxK, row-major) . B."""
        nn = self.layout is Layout.NN
        return {
            "layout_a": "cutlass::layout::RowMajor",
            "layout_b": "cutlass::layout::RowMajor" if nn else "cutlass::layout::ColumnMajor",
            "layout_b_note": "CUTLASS's KxN view of B",
            "layout_d": "cutlass::layout::RowMajor",
            "transposed_note": "",
            "problem_mn": "M, N",
            "operand_a": "A",
            "a_stride_m": "int64_t(K)",
            "a_stride_k": "Int<1>{}",
            "operand_b": "B",
            "b_stride_n": "Int<1>{}" if nn else "int64_t(K)",
            "b_stride_k": "int64_t(N)" if nn else "Int<1>{}",
            "d_strides": "int64_t(N), Int<1>{}",
        }

    def _transposed_operands(self) -> dict[str, str]:
        """C^T (NxM, column-major: C's memory) = B^T (NxK) . A^T (KxM): CUTLASS's A is our B,
        its B our A, its D our C, and its M, N our N, M."""
        nn = self.layout is Layout.NN
        return {
            # our B: KxN row-major (NN) is B^T NxK column-major; NxK row-major (TN) is row-major
            "layout_a": "cutlass::layout::ColumnMajor" if nn else "cutlass::layout::RowMajor",
            "layout_b": "cutlass::layout::ColumnMajor",  # our A, MxK row-major: K-major
            "layout_b_note": "our A (MxK row-major) as CUTLASS's KxN B",
            "layout_d": "cutlass::layout::ColumnMajor",  # C^T: C's row-major memory
            "transposed_note": (
                "// Tile M below a wgmma's 64 rows: CUTLASS computes the transposed problem,\n"
                "// C^T (NxM) = B^T . A^T, so that the wgmma's M runs along N. Its tile and\n"
                f"// cluster below are ours transposed (ours: {self.tile_m}x{self.tile_n}, "
                f"{self.cluster_m}x{self.cluster_n}).\n"
            ),
            "problem_mn": "N, M",
            "operand_a": "B",
            "a_stride_m": "Int<1>{}" if nn else "int64_t(K)",
            "a_stride_k": "int64_t(N)" if nn else "Int<1>{}",
            "operand_b": "A",
            "b_stride_n": "int64_t(K)",
            "b_stride_k": "Int<1>{}",
            "d_strides": "Int<1>{}, int64_t(N)",
        }


def mma_tile(tile_m: int, tile_n: int) -> tuple[int, int]:
    """CUTLASS's tile M×N for C's tile M×N: transposed where tile M is below a wgmma's rows."""
    return (tile_n, tile_m) if tile_m < MMA_M else (tile_m, tile_n)


@functools.cache
def tile_validity(tile_m: int, tile_n: int, schedule: str, warpgroups: str) -> Validity:
    """Whether the kernel schedule and its warpgroups can take the tile (every other knob aside).
    A tile M below 64 is the transposed problem's tile N (:attr:`Sm90Config.swapped`)."""
    cutlass_m, cutlass_n = mma_tile(tile_m, tile_n)
    if tile_m >= MMA_M:
        return mma_tile_validity(cutlass_m, cutlass_n, schedule, warpgroups)
    if tile_n not in TRANSPOSED_TILE_N:
        return invalid(
            f"tile M {tile_m} runs the transposed problem, whose wgmma M runs along N: "
            f"tile N {tile_n} must be one of {sorted(TRANSPOSED_TILE_N)}"
        )
    verdict = mma_tile_validity(cutlass_m, cutlass_n, schedule, warpgroups)
    if not verdict:
        return invalid(f"{verdict.reason} (the transposed problem's tile: {cutlass_m}x{cutlass_n})")
    return verdict


@functools.cache
def epilogue_tile_validity(
    tile_m: int, tile_n: int, epilogue: str, warpgroups: str, epilogue_n: int
) -> Validity:
    """Whether an explicit TMA epilogue tile N (``epilogue_n``) fits the kernel's tile."""
    if not epilogue_n:
        return VALID
    if epilogue != "tma" or warpgroups == "n":
        return invalid(
            "epilogue_n sets the builder's TMA epilogue tile: epilogue='tma', warpgroups='m'"
        )
    mma_tile_n = mma_tile(tile_m, tile_n)[1]
    if mma_tile_n % epilogue_n:
        return invalid(f"epilogue tile N {epilogue_n} must divide the MMA tile's N {mma_tile_n}")
    return VALID


def mma_tile_validity(tile_m: int, tile_n: int, schedule: str, warpgroups: str) -> Validity:
    """:func:`tile_validity` of CUTLASS's tile."""
    if schedule == "coop" and tile_m < 128:
        return invalid("CUTLASS's cooperative kernel needs tile M ≥ 128")
    if warpgroups == "n":
        if schedule != "coop":
            return invalid("only the cooperative schedule has two warpgroups to split N over")
        if tile_n not in SPLIT_N_TILE_N:
            return invalid(
                f"tile N {tile_n} split over two warpgroups: needs one of {sorted(SPLIT_N_TILE_N)}"
            )
    elif schedule == "coop" and tile_m % 128:
        return invalid(
            "the cooperative schedule splits tile M over two warpgroups: needs a multiple of "
            "128 (or warpgroups='n')"
        )
    if schedule != "coop" and tile_m > 128:
        return invalid(f"tile M {tile_m} is only offered with the cooperative schedule")
    if (tile_n // 2 if warpgroups == "n" else tile_n) > 256:
        return invalid(f"a wgmma is at most 256 wide: tile N {tile_n} needs warpgroups='n'")
    consumers = 256 if schedule == "coop" else 128
    accumulators = tile_m * tile_n // consumers
    if accumulators > MAX_ACCUMULATORS:
        return invalid(
            f"{tile_m}x{tile_n} needs {accumulators} fp32 accumulators per consumer "
            f"thread (> {MAX_ACCUMULATORS}): it would spill"
        )
    return VALID
