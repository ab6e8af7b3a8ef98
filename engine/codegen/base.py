"""What every kernel family shares: validity verdicts, rendering, enumeration, sampling, features.

A family is a frozen config dataclass (one instance = one kernel variant) whose class attributes
describe the family:

  FAMILY    short name ("sm90", "sm80")
  ARCHS     the archs its libraries are compiled for (passed to engine.compilation.compile)
  SPACE     knob name → the values the search may choose, in order (the enumeration space)
  TEMPLATE  file name under engine/cuda/templates/

and whose ``is_valid(problem, arch)`` is the only statement of legality. ``name`` is
deterministic (cache key, file name, database key) and ``render()`` returns a complete .cu
implementing the kernel C ABI (engine/cuda/gemmforge_abi.h).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Self

from engine.problem import Layout, Problem

# The templates' header comments still name the files' former paths (engine/families/...): a
# rendered source's bytes are its kernel's name, cache key and database key, so editing them would
# orphan every recorded kernel and cached build.
TEMPLATES = Path(__file__).resolve().parents[1] / "cuda" / "templates"


@dataclass(frozen=True, slots=True)
class Validity:
    """A legality verdict; ``reason`` says what is wrong when ``ok`` is False."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


VALID = Validity(True)


def invalid(reason: str) -> Validity:
    return Validity(False, reason)


@functools.cache
def load_template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


@dataclass(frozen=True)
class KernelConfig:
    """Base class of family configs (subclasses are frozen dataclasses with a ``layout``)."""

    FAMILY: ClassVar[str] = ""
    ARCHS: ClassVar[tuple[str, ...]] = ()
    SPACE: ClassVar[Mapping[str, Sequence[Any]]] = {}
    TEMPLATE: ClassVar[str] = ""

    layout: Layout

    # -- to be provided by each family -----------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        """The only statement of legality. ``problem=None``: legal for some problem of
        ``self.layout``; ``arch=None``: legal for the family's first arch."""
        raise NotImplementedError

    def within_space(self) -> Validity:
        """Every knob takes one of its SPACE values and the layout is a Layout."""
        for knob, values in self.SPACE.items():
            if getattr(self, knob) not in values:
                return invalid(f"{knob}={getattr(self, knob)!r} is not one of {list(values)}")
        if not isinstance(self.layout, Layout):
            return invalid(f"layout {self.layout!r} is not a Layout")
        return VALID

    def fits(self, problem: Problem | None) -> Validity:
        """The problem-dependent part of legality shared by every family: the layout matches
        and a split-K count (``splits``) does not exceed the number of K tiles."""
        if problem is None:
            return VALID
        if problem.layout is not self.layout:
            return invalid(f"built for layout {self.layout.value}, problem is {problem.key}")
        splits, tile_k = getattr(self, "splits", 1), getattr(self, "tile_k", 1)
        k_tiles = math.ceil(problem.k / tile_k)
        if splits > k_tiles:
            return invalid(f"{splits} splits but K={problem.k} has only {k_tiles} tiles")
        return VALID

    @property
    def name(self) -> str:
        raise NotImplementedError

    def substitutions(self) -> dict[str, str]:
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------
    def render(self) -> str:
        """A complete .cu source implementing the kernel C ABI for this config.

        Raises ValueError for a config that is not valid for any problem.
        """
        verdict = self.is_valid(None)
        if not verdict:
            raise ValueError(f"{self.name}: {verdict.reason}")
        return load_template(self.TEMPLATE).substitute(
            name=self.name, layout=self.layout.value.upper(), **self.substitutions()
        )

    @property
    def archs(self) -> tuple[str, ...]:
        return self.ARCHS

    @classmethod
    def archs_for(cls, target: str | None = None) -> tuple[str, ...]:
        """The archs to compile for when the library will run on ``target`` (e.g. ``sm_90``);
        ``None``: every arch of the family (a portable build)."""
        return cls.ARCHS

    def knobs(self) -> dict[str, Any]:
        """Knob name → value (the layout included), JSON-ready."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, Layout) else value
        return out

    def features(self, problem: Problem | None = None) -> dict[str, float]:
        """Numeric features for learned models: log2 of numeric knobs, one-hot of categorical
        ones (over SPACE), and the problem's features and fit (tile waste, tile count)."""
        out: dict[str, float] = {}
        for knob, values in self.SPACE.items():
            value = getattr(self, knob)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                out[knob] = float(value)
                out[f"log2_{knob}"] = math.log2(value) if value > 0 else -1.0
            else:
                for option in values:
                    out[f"{knob}={option}"] = 1.0 if value == option else 0.0
        out["layout_tn"] = 1.0 if self.layout is Layout.TN else 0.0
        if problem is not None:
            out.update({f"problem_{k}": v for k, v in problem.features().items()})
            out.update(self.problem_fit(problem))
        return out

    def problem_fit(self, problem: Problem) -> dict[str, float]:
        """How the tile grid fits the problem; families extend this."""
        tm, tn = self.tile_mn()
        tiles_m, tiles_n = math.ceil(problem.m / tm), math.ceil(problem.n / tn)
        return {
            "log2_tiles": math.log2(tiles_m * tiles_n),
            "tile_efficiency": (problem.m * problem.n) / (tiles_m * tm * tiles_n * tn),
        }

    def tile_mn(self) -> tuple[int, int]:
        raise NotImplementedError

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`knobs`; raises TypeError/ValueError on unknown or missing knobs."""
        data = dict(knobs)
        data["layout"] = Layout.parse(data["layout"]) if "layout" in data else None
        return cls(**data)

    # -- the space -------------------------------------------------------------------------
    @classmethod
    def space_size(cls) -> int:
        return math.prod(len(v) for v in cls.SPACE.values()) * len(Layout)

    @classmethod
    def candidates(cls, layout: Layout) -> Iterator[Self]:
        """Every point of SPACE for ``layout`` (valid or not), in a fixed order."""
        keys = list(cls.SPACE)
        for values in itertools.product(*(cls.SPACE[k] for k in keys)):
            yield cls(layout=layout, **dict(zip(keys, values, strict=True)))

    @classmethod
    def enumerate(
        cls,
        problem: Problem | None = None,
        *,
        layout: Layout | None = None,
        arch: str | None = None,
    ) -> Iterator[Self]:
        """The valid configs for ``problem`` (or for every problem of ``layout``), in order."""
        if problem is not None:
            layout = problem.layout
        if layout is None:
            raise ValueError("enumerate needs a problem or a layout")
        for config in cls.candidates(layout):
            if config.is_valid(problem, arch):
                yield config

    @classmethod
    def sample(
        cls,
        n: int,
        problem: Problem | None = None,
        *,
        layout: Layout | None = None,
        arch: str | None = None,
        seed: int | random.Random = 0,
    ) -> list[Self]:
        """``n`` distinct valid configs drawn uniformly (without replacement) from the valid set.

        Rejection sampling over SPACE is uniform over the valid configs; it stops after a bounded
        number of draws, so fewer than ``n`` come back when the valid set is smaller.
        """
        if problem is not None:
            layout = problem.layout
        if layout is None:
            raise ValueError("sample needs a problem or a layout")
        rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        keys = list(cls.SPACE)
        chosen: dict[str, Self] = {}
        for _ in range(max(1000, 500 * n)):
            if len(chosen) >= n:
                break
            values = {k: rng.choice(list(cls.SPACE[k])) for k in keys}
            config = cls(layout=layout, **values)
            if config.name not in chosen and config.is_valid(problem, arch):
                chosen[config.name] = config
        return list(chosen.values())
