"""The mirror proposer: start where cuBLASLt is, with our own kernels.

cuBLASLt-autotune is the baseline to beat, and what it runs on a problem is known
(engine.timing.cublaslt_kernels: tile, tile K and stages, cluster, split-K, recorded by every
measurement's autotuning and by bench/cublaslt_kernels.py). The configs nearest to that kernel
are a strong first guess: the same tile and cluster with CUTLASS's Hopper schedules, then their
neighbours; on the small, long-K shapes also the sm80 family's split-K tiles. The proposer ranks
the search space's sm90 and sm80 members by :func:`mirror_distance` to each of the problem's
cuBLASLt kernels (the autotuned pick first, then the heuristic's choices),
and proposes the nearest untried ones, never beyond ``MAX_DISTANCE``: past that its share of a
batch goes to the other proposers.
"""

from __future__ import annotations

import json
import random
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.codegen import KernelConfig
from engine.codegen.sm90 import Sm90Config
from engine.outcomes import CandidateRecord
from engine.problem import Problem
from engine.propose.proposers import Proposal
from engine.propose.space import SearchSpace
from engine.timing import cublaslt_kernels

MAX_DISTANCE = 6.0
# Weights of a mismatch: the tile decides the most, then K per stage, cluster and split-K.
TILE_WEIGHT = 3.0
TILE_K_WEIGHT = 1.5
CLUSTER_WEIGHT = 1.5
SPLIT_WEIGHT = 2.0
STAGES_WEIGHT = 0.5
# Knobs cuBLASLt's configuration says nothing about: the scheduler's defaults first.
DEFAULTS_WEIGHT = 0.1
MIRRORED_FAMILIES = ("sm90", "sm80")
OTHER_ISA_DISTANCE = 0.5  # sm80's mma.sync kernels, beside cuBLASLt's wgmma ones

Kernel = Mapping[str, Any]  # engine.timing.cublaslt_kernels.LtKernel.to_dict()


class MirrorFileError(ValueError):
    """A --cublaslt-kernels file that is neither bench/cublaslt_kernels.py's nor a campaign's."""


def mirror_distance(config: KernelConfig, kernel: Kernel) -> float:
    """How far a config is from a cuBLASLt kernel (0: an sm90 config with the same tile, tile
    K, cluster, stages and split-K, and the scheduler's defaults). Fields cuBLASLt left open cost
    nothing. An sm80 config (no cluster: one CTA a side) is ``OTHER_ISA_DISTANCE`` further: its
    mma.sync kernels are not what cuBLASLt runs on Hopper, but its small split-K tiles are the
    nearest to cuBLASLt's on the small, long-K shapes."""
    knobs = config.knobs()

    def differs(knob: str) -> bool:
        wanted = kernel.get(knob)
        return wanted is not None and knobs.get(knob, 1) != wanted

    distance = TILE_WEIGHT * (differs("tile_m") + differs("tile_n"))
    distance += TILE_K_WEIGHT * differs("tile_k")
    distance += CLUSTER_WEIGHT * (differs("cluster_m") + differs("cluster_n"))
    distance += STAGES_WEIGHT * differs("stages")
    splits = int(kernel.get("splitk") or 1)
    if config.FAMILY == "sm90":
        ours = knobs["splits"] if knobs["decomposition"] == "splitk" else 1
        defaults = (
            knobs["scheduler"] != "persistent" and splits == 1,
            knobs["epilogue"] != "tma",
            knobs["raster"] != "heuristic",
            knobs["swizzle"] != 1,
            kernel.get("stages") is None and knobs["stages"] != 0,  # its choice: ours too
            knobs["warpgroups"] != "m",
        )
    else:
        ours = knobs["splits"]
        defaults = (knobs["swizzle"] != 1,)
        distance += OTHER_ISA_DISTANCE
    distance += SPLIT_WEIGHT * (ours != splits)
    distance += DEFAULTS_WEIGHT * sum(defaults)
    return distance


def exact_mirrors(
    problem: Problem, kernels: Sequence[Kernel], arch: str | None = "sm_90a"
) -> list[Sm90Config]:
    """Per cuBLASLt kernel, the sm90 configs that copy it as closely as the family allows: its
    tile (when the family has it), tile K, cluster (at most 2 a side), stages and split-K, with
    the cooperative and the ping-pong schedule (the cooperative one with its warpgroups split
    along N where only that takes the tile), the TMA epilogue and the scheduler's defaults;
    the valid ones for ``problem``, each once. A library-space campaign adds them to its space
    (they may be outside the curated library: ``engine prebuild --mirror`` builds them)."""
    space = Sm90Config.SPACE
    out: dict[str, Sm90Config] = {}
    for kernel in kernels:
        tile_m, tile_n = kernel.get("tile_m"), kernel.get("tile_n")
        if tile_m not in space["tile_m"] or tile_n not in space["tile_n"]:
            continue
        tile_k = kernel.get("tile_k")
        stages = kernel.get("stages")
        splits = int(kernel.get("splitk") or 1)
        split_knobs: dict[str, Any] = {}
        if splits > 1:
            offered = [s for s in space["splits"] if 1 < s <= splits]
            split_knobs = {
                "scheduler": "streamk",
                "decomposition": "splitk",
                "splits": max(offered, default=2),
            }
        copies = [
            Sm90Config(
                layout=problem.layout,
                tile_m=tile_m,
                tile_n=tile_n,
                tile_k=tile_k if tile_k in space["tile_k"] else 64,
                cluster_m=min(int(kernel.get("cluster_m") or 1), 2),
                cluster_n=min(int(kernel.get("cluster_n") or 1), 2),
                schedule=schedule,
                stages=stages if stages in space["stages"] else 0,
                warpgroups=warpgroups,
                **split_knobs,
            )
            for schedule, warpgroups in (("coop", "m"), ("pingpong", "m"), ("coop", "n"))
        ]
        valid = [c for c in copies if c.is_valid(problem, arch)]
        # Warpgroups split along N only where the builder's split along M cannot take the tile
        # (192×192): cuBLASLt's configuration does not say how its warpgroups share a tile.
        if any(not c.split_n for c in valid):
            valid = [c for c in valid if not c.split_n]
        for config in valid:
            out.setdefault(config.name, config)
    return list(out.values())


def with_exact_mirrors(space: SearchSpace, kernels: Sequence[Kernel]) -> SearchSpace:
    """``space`` (a curated library's) with the exact mirrors of ``kernels`` it lacks."""
    extra = [c for c in exact_mirrors(space.problem, kernels) if c.name not in space]
    return SearchSpace.from_configs(space.problem, [*space.configs, *extra]) if extra else space


class MirrorProposer:
    """The untried sm90 and sm80 configs nearest to the kernels cuBLASLt runs on the
    problem."""

    name = "mirror"

    def __init__(
        self, targets: Mapping[str, Sequence[Kernel]], *, max_distance: float = MAX_DISTANCE
    ) -> None:
        # problem key → cuBLASLt kernels, the most telling first
        self.targets: dict[str, list[Kernel]] = {k: list(v) for k, v in targets.items()}
        self.max_distance = max_distance
        self._rankings: weakref.WeakKeyDictionary[SearchSpace, list[Any]] = (
            weakref.WeakKeyDictionary()
        )

    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        chosen = [entry for entry in self.ranking(problem, space) if entry[2] not in exclude][:n]
        return [
            Proposal(
                space.config(name),
                self.name,
                meta={"cublaslt_kernel": kernel.get("label"), "distance": round(distance, 2)},
            )
            for distance, _, name, kernel in chosen
        ]

    def ranking(self, problem: Problem, space: SearchSpace) -> list[tuple[float, int, str, Kernel]]:
        """The space's configs within reach, nearest first: (distance, the rank of the cuBLASLt
        kernel it is nearest to, name, that kernel). Kept per space: a full space holds 10⁵
        configs."""
        if (cached := self._rankings.get(space)) is not None:
            return cached
        best: dict[str, tuple[float, int, str, Kernel]] = {}
        for rank, kernel in enumerate(self.targets.get(problem.key, ())):
            for config in space.configs:
                if config.FAMILY not in MIRRORED_FAMILIES:
                    continue
                distance = mirror_distance(config, kernel)
                if distance > self.max_distance:
                    continue
                entry = (distance, rank, config.name, kernel)
                if config.name not in best or entry[:3] < best[config.name][:3]:
                    best[config.name] = entry
        ranking = sorted(best.values(), key=lambda entry: entry[:3])
        self._rankings[space] = ranking
        return ranking

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        return None

    def learn_cublaslt_kernels(self, problem: Problem, kernels: Mapping[str, Any]) -> None:
        """What a GPU step measured cuBLASLt running on ``problem`` goes first (its autotuned
        pick beats any heuristic list read from a file); the ranking is made again."""
        known = self.targets.get(problem.key, [])
        merged = merge_kernels(cublaslt_kernels.by_layout(kernels, problem.layout.value), known)
        if merged != known:
            self.targets[problem.key] = merged
            # a ranking depends on its problem's targets alone: the other shapes' stay
            for space in [s for s in self._rankings if s.problem.key == problem.key]:
                del self._rankings[space]


def merge_kernels(first: Sequence[Kernel], then: Sequence[Kernel]) -> list[Kernel]:
    """``first``, then those of ``then`` not among them, in order."""
    out = list(first)
    out += [k for k in then if k not in out]
    return out


def load_targets(*paths: Path) -> dict[str, list[Kernel]]:
    """Problem key → cuBLASLt kernels, the most telling first: this layout's autotuned pick, the
    heuristic's choices, then the same for the shape's other layout. Reads
    bench/cublaslt_kernels.py's JSON (``kernels``) or a campaign's results (``final``); of
    several files, each problem's kernels in the files' order, each once."""
    targets: dict[str, list[Kernel]] = {}
    for path in paths:
        for key, kernels in _load_targets(path).items():
            targets[key] = merge_kernels(targets.get(key, []), kernels)
    return targets


def _load_targets(path: Path) -> dict[str, list[Kernel]]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise MirrorFileError(f"{path}: cannot read cuBLASLt's kernels: {exc}") from exc
    by_layout: dict[str, dict[str, list[Kernel]]] = {}  # shape → layout → kernels
    if isinstance(data.get("kernels"), dict):
        for key, entry in data["kernels"].items():
            kernels = [entry.get("autotune"), *entry.get("heuristic", ())]
            _add(by_layout, key, [k for k in kernels if k])
    elif isinstance(data.get("final"), dict):
        for key, final in data["final"].items():
            for runner, pair in final.get("cublaslt_kernels", {}).items():
                layout = runner.rsplit("_", 1)[1]
                kernels = [pair.get("autotune"), pair.get("heuristic")]
                _add(by_layout, f"{key.rsplit('_', 1)[0]}_{layout}", [k for k in kernels if k])
    else:
        raise MirrorFileError(
            f"{path}: no 'kernels' (bench/cublaslt_kernels.py) or 'final' (a campaign's results)"
        )
    targets: dict[str, list[Kernel]] = {}
    for shape, layouts in by_layout.items():
        for layout in layouts:
            others = [k for other, ks in layouts.items() if other != layout for k in ks]
            targets[f"{shape}_{layout}"] = [*layouts[layout], *others]
    return targets


def _add(by_layout: dict[str, dict[str, list[Kernel]]], key: str, kernels: list[Kernel]) -> None:
    shape, layout = key.rsplit("_", 1)
    by_layout.setdefault(shape, {}).setdefault(layout, []).extend(kernels)
