"""What cuBLASLt runs: an algorithm's configuration, named in our terms.

cuBLASLt describes each algorithm it offers by a few enumerated attributes
(``cublasLtMatmulAlgoConfigAttributes_t``): a tile, a stage layout (K per stage × stages), a
thread-block cluster shape, a split-K count and its reduction scheme, CTA swizzling. The shim
(``cublaslt_algo_config`` in engine/cuda/baselines.cu) reads the raw values; this module names
them with the enumerations of the very ``cublasLt.h`` the shim was built against, so a new
cuBLAS release cannot make us misread a tile id.

Orientation: the shim computes row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ, so cuBLASLt's rows
are our N and its columns our M. A cuBLASLt tile "128x256" and cluster "2x1x1" are our 256×128
tile (M×N) and a 1×2 cluster; :class:`LtKernel` holds them in our orientation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The order of cublasLtMatmulAlgoConfigAttributes_t (0 ..): what cublaslt_algo_config returns.
CONFIG_ATTRIBUTES = (
    "algo_id",
    "tile_id",
    "splitk",
    "reduction_scheme",
    "swizzle",
    "custom_option",
    "stages_id",
    "inner_shape_id",
    "cluster_shape_id",
)
REDUCTION_SCHEMES = {0: "none", 1: "inplace", 2: "compute_type", 4: "output_type"}

_ENUM = re.compile(r"typedef\s+enum\s*\{(?P<body>[^}]*)\}\s*(?P<name>\w+)\s*;", re.S)
_MEMBER = re.compile(r"^\s*(?P<name>[A-Z][A-Z0-9_x]*)\s*=\s*(?P<value>0x[0-9a-fA-F]+|\d+)", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


@dataclass(frozen=True)
class LtEnums:
    """The enumerations that name a cuBLASLt algorithm's configuration."""

    tiles: Mapping[int, tuple[int, int]]  # id → (rows, columns) of cuBLASLt's C
    stages: Mapping[int, tuple[int, int | None]]  # id → (K per stage, stages; None = auto)
    clusters: Mapping[int, tuple[int, int, int] | None]  # id → (x, y, z); None = auto
    inner_shapes: Mapping[int, str]


@dataclass(frozen=True)
class LtKernel:
    """One cuBLASLt algorithm, in our orientation (M = rows of our row-major C). A field is
    None where cuBLASLt leaves it to the library (auto) or the header does not name the id."""

    algo_id: int
    tile_m: int | None
    tile_n: int | None
    tile_k: int | None
    stages: int | None
    cluster_m: int | None
    cluster_n: int | None
    splitk: int
    reduction: str
    swizzle: int
    custom_option: int
    inner_shape: str | None
    raw: Mapping[str, int]  # the attribute values as cuBLASLt reported them

    @property
    def label(self) -> str:
        """e.g. ``algo66 128x256x64 c2x1 s4`` (``s?``: stages left to cuBLASLt)."""
        tile = "x".join(str(v) if v is not None else "?" for v in self.tile_mnk)
        parts = [f"algo{self.algo_id}", tile]
        if self.cluster_m is not None and self.cluster_n is not None:
            parts.append(f"c{self.cluster_m}x{self.cluster_n}")
        parts.append(f"s{self.stages}" if self.stages is not None else "s?")
        if self.splitk > 1:
            parts.append(f"splitk{self.splitk}_{self.reduction}")
        if self.swizzle:
            parts.append(f"swizzle{self.swizzle}")
        return " ".join(parts)

    @property
    def tile_mnk(self) -> tuple[int | None, int | None, int | None]:
        return self.tile_m, self.tile_n, self.tile_k

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "raw": dict(self.raw), "label": self.label}


def parse_enums(header: str) -> LtEnums:
    """The tile, stage, cluster and inner-shape enumerations of a ``cublasLt.h``'s text."""
    enums = {
        m["name"]: {
            member["name"]: int(member["value"], 0)
            for member in _MEMBER.finditer(_COMMENT.sub("", m["body"]))
        }
        for m in _ENUM.finditer(header)
    }
    tiles: dict[int, tuple[int, int]] = {}
    for name, value in enums.get("cublasLtMatmulTile_t", {}).items():
        if m := re.fullmatch(r"CUBLASLT_MATMUL_TILE_(\d+)x(\d+)", name):
            tiles[value] = (int(m[1]), int(m[2]))
    stages: dict[int, tuple[int, int | None]] = {}
    for name, value in enums.get("cublasLtMatmulStages_t", {}).items():
        if m := re.fullmatch(r"CUBLASLT_MATMUL_STAGES_(\d+)x(\d+|AUTO)", name):
            stages[value] = (int(m[1]), None if m[2] == "AUTO" else int(m[2]))
    clusters: dict[int, tuple[int, int, int] | None] = {}
    for name, value in enums.get("cublasLtClusterShape_t", {}).items():
        if name == "CUBLASLT_CLUSTER_SHAPE_AUTO":
            clusters[value] = None
        elif m := re.fullmatch(r"CUBLASLT_CLUSTER_SHAPE_(\d+)x(\d+)x(\d+)", name):
            clusters[value] = (int(m[1]), int(m[2]), int(m[3]))
    inner = {
        value: name.removeprefix("CUBLASLT_MATMUL_INNER_SHAPE_").lower()
        for name, value in enums.get("cublasLtMatmulInnerShape_t", {}).items()
        if not name.endswith("_END")
    }
    return LtEnums(tiles, stages, clusters, inner)


def load_enums(include_dir: Path) -> LtEnums | None:
    """The enumerations of ``include_dir/cublasLt.h``; None when it cannot be read."""
    header = Path(include_dir) / "cublasLt.h"
    try:
        return _parsed(header, header.stat().st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=4)
def _parsed(header: Path, _mtime_ns: int) -> LtEnums:
    return parse_enums(header.read_text(errors="replace"))


def describe(values: Sequence[int], enums: LtEnums | None) -> LtKernel:
    """An algorithm from the shim's raw attribute values (−1: not reported)."""
    raw = dict(zip(CONFIG_ATTRIBUTES, (int(v) for v in values), strict=False))
    tile = enums.tiles.get(raw.get("tile_id", -1)) if enums else None
    stage = enums.stages.get(raw.get("stages_id", -1)) if enums else None
    cluster = enums.clusters.get(raw.get("cluster_shape_id", -1)) if enums else None
    inner = enums.inner_shapes.get(raw.get("inner_shape_id", -1)) if enums else None
    return LtKernel(
        algo_id=raw.get("algo_id", -1),
        # cuBLASLt's rows are our N, its columns our M (see the module's docstring)
        tile_m=tile[1] if tile else None,
        tile_n=tile[0] if tile else None,
        tile_k=stage[0] if stage else None,
        stages=stage[1] if stage else None,
        cluster_m=cluster[1] if cluster else None,
        cluster_n=cluster[0] if cluster else None,
        splitk=max(1, raw.get("splitk", 1)),
        reduction=REDUCTION_SCHEMES.get(raw.get("reduction_scheme", 0), "unknown"),
        swizzle=max(0, raw.get("swizzle", 0)),
        custom_option=max(0, raw.get("custom_option", 0)),
        inner_shape=inner,
        raw=raw,
    )


def from_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per cuBLASLt-autotune runner of a measurement record (``cublaslt_autotune_nn``, …), what
    its autotuned pick and the heuristic's first choice run (engine.timing.baselines.with_kernels),
    where the shim said."""
    return {
        runner: {"autotune": report.get("kernel"), "heuristic": report.get("heuristic_kernel")}
        for runner, report in (record.get("autotune") or {}).items()
        if report.get("kernel") or report.get("heuristic_kernel")
    }


def by_layout(kernels: Mapping[str, Any], layout: str) -> list[dict[str, Any]]:
    """:func:`from_record`'s kernels as a list, the most telling first: ``layout``'s autotuned
    pick and heuristic choice, then the other layout's."""
    ordered = sorted(kernels.items(), key=lambda item: not item[0].endswith(f"_{layout}"))
    return [
        kernel
        for _, pair in ordered
        for kernel in (pair.get("autotune"), pair.get("heuristic"))
        if kernel
    ]
