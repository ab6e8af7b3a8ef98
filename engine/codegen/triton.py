"""Family triton: Triton HGEMMs compiled ahead of time to sm_90a cubins, behind the kernel C ABI.

One Triton kernel (templates/triton_hgemm.py) whose knobs are constexprs; a config fixes them and
``render()`` returns a .cu launcher (templates/triton.cu.tmpl) that embeds the kernel and its
compile spec. engine.compilation.compile runs Triton (engine.compilation.triton_aot) in its sandbox
to turn the kernel into a cubin the launcher includes, then nvcc builds the library: the verifier,
the timing, the compile cache and the bundles treat it like any other, and it runs without Triton
installed.

Knobs: CTA tile M×N×K, pipeline stages, warps, group-M rasterisation, split-K (each split's fp32
partial in the workspace; the last split of a tile to finish, counted by an atomic, sums them in
split order and stores C — one kernel launch, after a memset of the tile counters), a
persistent grid (one program an SM striding over the work), loads through pointers or through
TMA tensor descriptors built on the device (Hopper), the store through pointers or TMA, and
``even_k``: no K masks, for problems whose K is a whole number of K tiles.

``fixed_n`` and ``fixed_k`` (outside SPACE, like the longk family's variants: the learned policy's
logits are laid out by SPACE) build the kernel for one N and one K, the weight's dimensions, as
compile-time constants, the way torch Inductor compiles each shape; M stays a run-time value. 0
and 0: one binary for every shape of the layout. The launcher refuses any other N or K.

The space contains torch Inductor's mm configs (``max-autotune``'s ~20 Triton choices, after
its scaling of the blocks to the problem: every block 16–256, 1–5 stages, warps reduced to at
most one a 16×16 sub-tile, group-M 8): :func:`inductor_configs` gives them for a problem.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import ClassVar

from engine.codegen.base import TEMPLATES, KernelConfig, Validity, invalid
from engine.codegen.triton_blocks import TritonSpec, embed
from engine.problem import Layout, Problem

SMEM_LIMIT = 232448  # bytes of shared memory a block may opt in to on H100/H200 (227 KiB)
MAX_ACCUMULATORS = 128  # fp32 accumulators a thread: more spills
KERNEL_SOURCE = "triton_hgemm.py"
KERNEL_NAME = "hgemm"
SIGNATURE = {
    "A": "*fp16",
    "B": "*fp16",
    "C": "*fp16",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "workspace": "*i8",
}
ALIGNED = ("A", "B", "C", "workspace")  # the launcher checks them (16 and 256 bytes)

# torch Inductor's mm configs (torch/_inductor/template_heuristics/triton.py, the base
# heuristic's ``mm_configs``, which max-autotune tries on CUDA): (BLOCK_M, BLOCK_N, BLOCK_K,
# num_stages, num_warps), all with GROUP_M 8. Read from torch 2.13's source.
INDUCTOR_MM_CONFIGS: tuple[tuple[int, int, int, int, int], ...] = (
    (32, 32, 16, 1, 2),
    (32, 32, 128, 2, 4),
    (32, 64, 32, 5, 8),
    (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4),
    (64, 64, 16, 2, 4),
    (64, 64, 32, 2, 4),
    (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4),
    (64, 128, 32, 3, 4),
    (64, 128, 32, 4, 8),
    (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4),
    (128, 64, 32, 3, 4),
    (128, 64, 32, 4, 8),
    (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4),
    (128, 128, 64, 3, 4),
    (128, 128, 64, 5, 8),
    (128, 128, 128, 4, 8),
    (128, 256, 64, 4, 8),
)
INDUCTOR_GROUP_M = 8
INDUCTOR_MIN_BLOCK = 16


@functools.cache
def kernel_source() -> str:
    return (TEMPLATES / KERNEL_SOURCE).read_text()


@dataclass(frozen=True)
class TritonConfig(KernelConfig):
    FAMILY: ClassVar[str] = "triton"
    ARCHS: ClassVar[tuple[str, ...]] = ("sm_90a",)
    TEMPLATE: ClassVar[str] = "triton.cu.tmpl"
    SPACE: ClassVar[dict[str, tuple[object, ...]]] = {
        "tile_m": (16, 32, 64, 128, 256),
        "tile_n": (16, 32, 64, 128, 256),
        "tile_k": (16, 32, 64, 128, 256),
        "stages": (1, 2, 3, 4, 5, 6),
        "warps": (1, 2, 4, 8),
        "group_m": (1, 4, 8, 16),
        "splits": (1, 2, 3, 4, 6, 8, 12, 16),
        "schedule": ("tile", "persistent"),
        "loads": ("pointer", "tma"),
        "store": ("pointer", "tma"),
        "even_k": (False, True),
    }

    tile_m: int = 64
    tile_n: int = 64
    tile_k: int = 32
    stages: int = 3
    warps: int = 4
    group_m: int = 8
    splits: int = 1
    schedule: str = "tile"
    loads: str = "pointer"
    store: str = "pointer"
    even_k: bool = False
    fixed_n: int = 0
    fixed_k: int = 0

    @classmethod
    def candidates(cls, layout: Layout) -> Iterator[TritonConfig]:
        """SPACE without the tile, stage and warp combinations that no problem can take (too
        many warps or accumulators, too much shared memory), in SPACE's order: the full space's
        enumeration builds a fifth of the configs it would otherwise."""
        shape_knobs = ("tile_m", "tile_n", "tile_k", "stages", "warps")
        rest = [k for k in cls.SPACE if k not in shape_knobs]
        for shape in itertools.product(*(cls.SPACE[k] for k in shape_knobs)):
            if not _shape_fits(*shape):
                continue
            for values in itertools.product(*(cls.SPACE[k] for k in rest)):
                knobs = dict(zip(shape_knobs, shape, strict=True))
                knobs.update(zip(rest, values, strict=True))
                yield cls(layout=layout, **knobs)

    # -- legality --------------------------------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        if not (in_space := self.within_space()):
            return in_space
        if arch is not None and arch not in self.ARCHS:
            return invalid(f"triton kernels are compiled for sm_90a (TMA, wgmma), not {arch}")
        if self.warps * 256 > self.tile_m * self.tile_n:
            return invalid(
                f"{self.warps} warps for a {self.tile_m}x{self.tile_n} tile: fewer than a 16x16 "
                "sub-tile a warp"
            )
        accumulators = self.tile_m * self.tile_n // (32 * self.warps)
        if accumulators > MAX_ACCUMULATORS:
            return invalid(
                f"{accumulators} fp32 accumulators a thread (> {MAX_ACCUMULATORS}): would spill"
            )
        if self.smem_bytes > SMEM_LIMIT:
            return invalid(
                f"{self.stages} stages of {self.stage_bytes} B exceed {SMEM_LIMIT} B of shared "
                "memory"
            )
        if self.loads == "tma" and self.even_k:
            return invalid("TMA loads read zeros past K: even_k would only duplicate the kernel")
        if problem is not None and self.even_k and problem.k % self.tile_k:
            return invalid(f"even_k needs K % {self.tile_k} == 0, K is {problem.k}")
        if (fixed := self.fixed_nk_validity(problem)) is not None:
            return fixed
        return self.fits(problem)

    @property
    def fixed_nk(self) -> bool:
        return bool(self.fixed_n or self.fixed_k)

    def fixed_nk_validity(self, problem: Problem | None) -> Validity | None:
        """Why ``fixed_n``/``fixed_k`` rule the config (or the problem) out; None when they
        do not."""
        if not self.fixed_nk:
            return None
        if self.fixed_n <= 0 or self.fixed_k <= 0 or (self.fixed_n | self.fixed_k) % 8:
            return invalid(
                f"fixed_n={self.fixed_n}, fixed_k={self.fixed_k}: both set, positive multiples of 8"
            )
        if problem is not None and (problem.n, problem.k) != (self.fixed_n, self.fixed_k):
            return invalid(
                f"built for N={self.fixed_n}, K={self.fixed_k}; the problem has N={problem.n}, "
                f"K={problem.k}"
            )
        return None

    @property
    def stage_bytes(self) -> int:
        return (self.tile_m + self.tile_n) * self.tile_k * 2

    @property
    def smem_bytes(self) -> int:
        """Inductor's estimate (operand stages; Triton's own layout may use less)."""
        return self.stages * self.stage_bytes

    def tile_mn(self) -> tuple[int, int]:
        return self.tile_m, self.tile_n

    # -- naming and rendering --------------------------------------------------------------
    @property
    def name(self) -> str:
        parts = [
            "hgemm_triton",
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}",
            f"s{self.stages}",
            f"w{self.warps}",
            f"g{self.group_m}",
            self.layout.value,
            f"splitk{self.splits}",
        ]
        if self.schedule == "persistent":
            parts.append("persistent")
        if self.loads == "tma" or self.store == "tma":
            parts.append(
                f"tma{'l' if self.loads == 'tma' else ''}{'s' if self.store == 'tma' else ''}"
            )
        if self.even_k:
            parts.append("evenk")
        if self.fixed_nk:
            parts.append(f"n{self.fixed_n}k{self.fixed_k}")
        return "_".join(parts)

    def spec(self) -> TritonSpec:
        constexprs = {
            "BLOCK_M": self.tile_m,
            "BLOCK_N": self.tile_n,
            "BLOCK_K": self.tile_k,
            "GROUP_M": self.group_m,
            "SPLITS": self.splits,
            "STAGES": self.stages,
            "PERSISTENT": self.schedule == "persistent",
            "TMA": self.loads == "tma",
            "STORE_TMA": self.store == "tma",
            "B_KMAJOR": self.layout is Layout.TN,
            "EVEN_K": self.even_k,
        }
        if self.fixed_nk:  # N and K keep their places in the signature, as constants
            constexprs |= {"N": self.fixed_n, "K": self.fixed_k}
        return TritonSpec(
            kernel=KERNEL_NAME,
            signature={**SIGNATURE, **dict.fromkeys(constexprs, "constexpr")},
            constexprs=constexprs,
            num_warps=self.warps,
            num_stages=self.stages,
            aligned=ALIGNED,
        )

    def substitutions(self) -> dict[str, str]:
        nn = self.layout is Layout.NN
        even_k_check = (
            f"  if (K % {self.tile_k}) return int(cudaErrorInvalidValue);  // built without "
            "K masks\n"
            if self.even_k
            else ""
        )
        return {
            "b_desc": "KxN row-major" if nn else "NxK row-major",
            "tile_m": str(self.tile_m),
            "tile_n": str(self.tile_n),
            "tile_k": str(self.tile_k),
            "stages": str(self.stages),
            "warps": str(self.warps),
            "group_m": str(self.group_m),
            "splits": str(self.splits),
            "schedule": self.schedule,
            "loads": self.loads,
            "store": self.store,
            "even_k_note": ", no K masks (K a multiple of the K tile)" if self.even_k else "",
            "persistent": "true" if self.schedule == "persistent" else "false",
            "even_k_check": even_k_check,
            "fixed_nk_check": (
                f"  if (N != {self.fixed_n} || K != {self.fixed_k}) "
                "return int(cudaErrorInvalidValue);  // N and K are the kernel's constants\n"
                if self.fixed_nk
                else ""
            ),
            # a constexpr is no parameter of the compiled kernel
            "kernel_args": ", ".join(
                f"&{arg}"
                for arg in ("A", "B", "C", "M", "N", "K", "split_space", "scratch", "profile")
                if not (self.fixed_nk and arg in ("N", "K"))
            ),
            "triton_block": embed(self.spec(), kernel_source()),
        }

    def problem_fit(self, problem: Problem) -> dict[str, float]:
        fit = super().problem_fit(problem)
        k_tiles = math.ceil(problem.k / self.tile_k)
        fit["effective_splits"] = float(min(self.splits, k_tiles))
        return fit


@functools.cache
def _shape_fits(
    tile_m: object, tile_n: object, tile_k: object, stages: object, warps: object
) -> bool:
    """The tile/stage/warp part of :meth:`TritonConfig.is_valid`, for enumeration."""
    return bool(
        TritonConfig(
            layout=Layout.NN,
            tile_m=tile_m,
            tile_n=tile_n,
            tile_k=tile_k,
            stages=stages,
            warps=warps,
        ).is_valid()
    )


def inductor_configs(problem: Problem) -> list[TritonConfig]:
    """The configs torch Inductor's max-autotune tries for ``problem`` with its Triton mm
    template, in our space: its mm configs with each block clipped to the problem's next power
    of two (at least 16), warps cut to one a 16×16 sub-tile, deduplicated in its order. Inductor
    compiles K-mask-free code when K is a multiple of BLOCK_K (its ``EVEN_K``); so do these."""
    out: dict[str, TritonConfig] = {}
    m_hint = max(_next_power_of_2(problem.m), INDUCTOR_MIN_BLOCK)
    n_hint = max(_next_power_of_2(problem.n), INDUCTOR_MIN_BLOCK)
    k_hint = max(_next_power_of_2(problem.k), INDUCTOR_MIN_BLOCK)
    for bm, bn, bk, stages, warps in INDUCTOR_MM_CONFIGS:
        bm = max(min(bm, m_hint), INDUCTOR_MIN_BLOCK)
        bn = max(min(bn, n_hint), INDUCTOR_MIN_BLOCK)
        bk = max(min(bk, k_hint), INDUCTOR_MIN_BLOCK)
        config = TritonConfig(
            layout=problem.layout,
            tile_m=bm,
            tile_n=bn,
            tile_k=bk,
            stages=stages,
            warps=min(warps, bm * bn // 256),
            group_m=INDUCTOR_GROUP_M,
            even_k=problem.k % bk == 0,
        )
        if config.is_valid(problem):
            out.setdefault(config.name, config)
    return list(out.values())


def _next_power_of_2(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


# Inductor's decompose-K (torch/_inductor/utils.py ``use_decompose_k_choice``, ``get_k_splits``):
# where K is at least 32 times M and N, max-autotune also tries K cut into d parts (a batched mm
# and a sum), d dividing K with each part at least 128 long, powers-of-two parts first, at most
# 10 of them; at 64 times it drops the plain mm template.
INDUCTOR_DECOMPOSE_K_RATIO = 32
INDUCTOR_DECOMPOSE_K_SPLITS = 10
INDUCTOR_DECOMPOSE_K_MIN_PART = 128


def inductor_k_splits(problem: Problem) -> list[int]:
    """The K splits Inductor's decompose-K tries on ``problem`` (empty where it does not)."""
    ratio = INDUCTOR_DECOMPOSE_K_RATIO
    m, n, k = problem.m, problem.n, problem.k
    if k < ratio * m or k < ratio * n:
        return []
    powers, multiples_of_32, rest = [], [], []
    for d in range(2, min(k // m, k // n) + 1):
        part = k // d
        if k % d or part < INDUCTOR_DECOMPOSE_K_MIN_PART:
            continue
        if part & (part - 1) == 0:
            powers.append(d)
        elif part % 32 == 0:
            multiples_of_32.append(d)
        else:
            rest.append(d)
    return (powers + multiples_of_32 + rest)[:INDUCTOR_DECOMPOSE_K_SPLITS]


def inductor_split_configs(problem: Problem) -> list[TritonConfig]:
    """Inductor's decompose-K choices in our space: each of its K splits that the family offers,
    as the in-kernel split-K of the mm configs Inductor would try on one part (M×N×K/d)."""
    splits = TritonConfig.SPACE["splits"]
    out: dict[str, TritonConfig] = {}
    for d in inductor_k_splits(problem):
        if d not in splits:
            continue
        part = Problem(problem.m, problem.n, problem.k // d, problem.layout)
        for config in inductor_configs(part):
            split = replace(config, splits=d, even_k=problem.k % config.tile_k == 0)
            if split.is_valid(problem):
                out.setdefault(split.name, split)
    return list(out.values())
