"""Family sm80: CuTe multistage mma.sync GEMMs that run on Ampere, Ada and Hopper.

Built on CUTLASS's ``MainloopSm80CpAsync`` collective (cp.async multistage pipeline, swizzled
shared memory, ldmatrix, ``mma.sync.m16n8k16`` fp32-accumulate) inside our own kernel, which adds
CTA rasterisation (block swizzle) and split-K (fp32 partials in the workspace, then a
fixed-order reduction kernel that rounds once to fp16). Knobs: CTA tile M×N×K, warp layout,
stages, block swizzle, split-K factor (clamped at run time to the number of K tiles).

Libraries are compiled for sm_80 and sm_90 (sm_80 SASS runs on sm_86/sm_89 but not on Hopper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from engine.families.base import KernelConfig, Validity, invalid
from engine.problem import Layout, Problem

# Dynamic shared memory a block may opt in to, per arch.
SMEM_LIMIT = {
    "sm_80": 166912,  # A100 (163 KiB)
    "sm_86": 101376,  # 99 KiB
    "sm_89": 101376,
    "sm_90": 232448,  # H100/H200 (227 KiB)
    "sm_90a": 232448,
}
MAX_ACCUMULATORS = 128  # fp32 accumulators per thread
MAX_WARPS = 8

B_KMAJOR = """\
// B (TN) is K-major in the (N, K) view: the same operand setup as A.
using SmemLayoutAtomB = SmemLayoutAtomA;
using SmemCopyAtomB = Copy_Atom<SM75_U32x4_LDSM_N, Half>;
using GmemTiledCopyB = decltype(make_tiled_copy(
    Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Half>{},
    Layout<Shape<Int<kThreads / (kTileK / 8)>, Int<kTileK / 8>>, Stride<Int<kTileK / 8>, _1>>{},
    Layout<Shape<_1, _8>>{}));"""

B_NMAJOR = """\
// B (NN) is N-major in the (N, K) view: 16-byte cp.async along N, N-major swizzled smem atoms,
// transposing ldmatrix.
constexpr int kAtomN = kTileN % 64 == 0 ? 64 : 32;
using SmemLayoutAtomB =
    decltype(composition(Swizzle<kAtomN == 64 ? 3 : 2, 3, 3>{},
                         Layout<Shape<Int<kAtomN>, _8>, Stride<_1, Int<kAtomN>>>{}));
using SmemCopyAtomB = Copy_Atom<SM75_U16x8_LDSM_T, Half>;
using GmemTiledCopyB = decltype(make_tiled_copy(
    Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Half>{},
    Layout<Shape<Int<kTileN / 8>, Int<kThreads / (kTileN / 8)>>, Stride<_1, Int<kTileN / 8>>>{},
    Layout<Shape<_8, _1>>{}));"""


@dataclass(frozen=True)
class Sm80Config(KernelConfig):
    FAMILY: ClassVar[str] = "sm80"
    ARCHS: ClassVar[tuple[str, ...]] = ("sm_80", "sm_90")
    TEMPLATE: ClassVar[str] = "sm80.cu.tmpl"
    SPACE: ClassVar[dict[str, tuple[object, ...]]] = {
        "tile_m": (32, 64, 128, 256),
        "tile_n": (32, 64, 128, 256),
        "tile_k": (32, 64),
        "warp_m": (1, 2, 4),
        "warp_n": (1, 2, 4),
        "stages": (2, 3, 4, 5),
        "swizzle": (1, 2, 4, 8),
        "splits": (1, 2, 3, 4, 8, 16, 32),
    }

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 32
    warp_m: int = 2
    warp_n: int = 2
    stages: int = 3
    swizzle: int = 1
    splits: int = 1

    @classmethod
    def archs_for(cls, target: str | None = None) -> tuple[str, ...]:
        """Only the SASS ``target`` runs: ``sm_90`` on Hopper, ``sm_80`` on Ampere and Ada
        (sm_80 SASS runs on sm_86/sm_89) — half the compile time of the portable build."""
        if target is None:
            return cls.ARCHS
        if target.startswith("sm_90"):
            return ("sm_90",)
        if target in ("sm_80", "sm_86", "sm_87", "sm_89"):
            return ("sm_80",)
        return cls.ARCHS

    @property
    def threads(self) -> int:
        return 32 * self.warp_m * self.warp_n

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.tile_m + self.tile_n) * self.tile_k * 2

    def tile_mn(self) -> tuple[int, int]:
        return self.tile_m, self.tile_n

    # -- legality --------------------------------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        if not (in_space := self.within_space()):
            return in_space
        arch = arch or self.ARCHS[0]
        if arch not in SMEM_LIMIT:
            return invalid(f"unknown arch {arch}: expected one of {sorted(SMEM_LIMIT)}")
        warps = self.warp_m * self.warp_n
        if warps > MAX_WARPS:
            return invalid(f"{warps} warps per CTA (> {MAX_WARPS})")
        if self.tile_m % (16 * self.warp_m) or self.tile_n % (16 * self.warp_n):
            return invalid(
                f"tile {self.tile_m}x{self.tile_n} does not split into {self.warp_m}x{self.warp_n} "
                "warp tiles of 16x16 multiples"
            )
        accumulators = self.tile_m * self.tile_n // self.threads
        if accumulators > MAX_ACCUMULATORS:
            return invalid(
                f"{accumulators} fp32 accumulators per thread (> {MAX_ACCUMULATORS}): would spill"
            )
        # 16-byte cp.async thread layouts must tile the CTA tile exactly.
        k_threads = self.tile_k // 8
        rows = self.threads // k_threads
        if self.tile_m % rows:
            return invalid(
                f"A copy covers {rows} rows per pass; tile M {self.tile_m} is not a multiple"
            )
        if self.layout is Layout.TN:
            if self.tile_n % rows:
                return invalid(
                    f"B copy covers {rows} rows per pass; tile N {self.tile_n} is not a multiple"
                )
        else:
            n_threads = self.tile_n // 8
            if self.threads % n_threads or self.tile_k % (self.threads // n_threads):
                return invalid(
                    f"B copy of {n_threads} threads along N does not tile {self.tile_k} K rows "
                    f"with {self.threads} threads"
                )
        limit = SMEM_LIMIT[arch]
        if self.smem_bytes > limit:
            return invalid(f"{self.smem_bytes} B of shared memory exceed {limit} B on {arch}")
        return self.fits(problem)

    # -- naming and rendering --------------------------------------------------------------
    @property
    def name(self) -> str:
        return (
            f"hgemm_sm80_{self.tile_m}x{self.tile_n}x{self.tile_k}_w{self.warp_m}x{self.warp_n}"
            f"_s{self.stages}_{self.layout.value}_sw{self.swizzle}_splitk{self.splits}"
        )

    def substitutions(self) -> dict[str, str]:
        nn = self.layout is Layout.NN
        return {
            "b_desc": "KxN row-major (N-major)" if nn else "NxK row-major (K-major)",
            "tile_m": str(self.tile_m),
            "tile_n": str(self.tile_n),
            "tile_k": str(self.tile_k),
            "warp_m": str(self.warp_m),
            "warp_n": str(self.warp_n),
            "stages": str(self.stages),
            "swizzle_log2": str(self.swizzle.bit_length() - 1),
            "splits": str(self.splits),
            "stride_b": "Stride<_1, int64_t, int64_t>" if nn else "Stride<int64_t, _1, int64_t>",
            "b_operand": B_NMAJOR if nn else B_KMAJOR,
            "b_k_offset": "int64_t(k0) * p.N" if nn else "k0",
            "b_stride_2d": "make_stride(_1{}, int64_t(p.N))"
            if nn
            else "make_stride(int64_t(p.K), _1{})",
        }

    def problem_fit(self, problem: Problem) -> dict[str, float]:
        fit = super().problem_fit(problem)
        k_tiles = math.ceil(problem.k / self.tile_k)
        fit["effective_splits"] = float(min(self.splits, k_tiles))
        return fit
