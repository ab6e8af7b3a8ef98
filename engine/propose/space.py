"""The set of configs a campaign may propose for one problem, with knob-distance lookups.

A space is either the full valid set of some families (``SearchSpace.full``: every point of each
family's SPACE that ``is_valid(problem, arch)`` accepts) or an explicit list (``from_configs``:
the configs of a recorded table, for replay). Proposers only ever choose members of the space,
so validity is settled here, by the families' own predicate.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.codegen import FAMILIES, KernelConfig
from engine.codegen.library import LIBRARIES, library
from engine.problem import Layout, Problem

DEFAULT_FAMILIES_BY_ARCH = {
    "sm_90": ("sm90", "sm80", "longk"),
    "sm_90a": ("sm90", "sm80", "longk"),
}
OTHER_FAMILY_DISTANCE = 99  # knob distance between configs of different families


HOPPER_ARCHS = ("sm_90", "sm_90a")
# Triton's whole knob space (682 000 configs a layout) beside sm90 and sm80 made a Hopper space
# 980 000 configs, 19 s and 600 MB to build for one problem instead of 275 000, 2 s and 60 MB, for
# knobs (group-M, store width, ...) that move little. Beside other families a full space takes its
# curated configs (Inductor's and the sweep's); searched alone (--families triton) it is whole.
CURATED_IN_FULL = ("triton",)


def families_for_arch(arch: str) -> tuple[str, ...]:
    """Families whose kernels run on ``arch`` (sm80 kernels run on every arch we know), and on
    Hopper the triton family where Triton is installed (it compiles that family's kernels)."""
    families = DEFAULT_FAMILIES_BY_ARCH.get(arch, ("sm80",))
    if arch in HOPPER_ARCHS and triton_installed():
        families += ("triton",)
    return families


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _layout_configs(family: str, layout: Layout, arch: str | None) -> tuple[KernelConfig, ...]:
    """Every config of ``family`` legal for some problem of ``layout`` (enumerated once)."""
    return tuple(FAMILIES[family].enumerate(layout=layout, arch=arch))


@dataclass(eq=False)  # hashed by identity: policies cache per-space index tensors
class SearchSpace:
    problem: Problem
    configs: list[KernelConfig]
    by_name: dict[str, int] = field(init=False, repr=False)
    _codes: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_name = {c.name: i for i, c in enumerate(self.configs)}
        if len(self.by_name) != len(self.configs):
            raise ValueError("a search space holds each config once")
        # One column per (family, knob) plus the family; -1 where the knob is another family's.
        columns = [("", "family")]
        for family in sorted({c.FAMILY for c in self.configs}):
            columns += [(family, knob) for knob in FAMILIES[family].SPACE]
        families = sorted({c.FAMILY for c in self.configs})
        codes = np.full((len(self.configs), len(columns)), -1, dtype=np.int16)
        for row, config in enumerate(self.configs):
            for col, (family, knob) in enumerate(columns):
                if col == 0:
                    codes[row, col] = families.index(config.FAMILY)
                elif family == config.FAMILY:
                    codes[row, col] = list(config.SPACE[knob]).index(getattr(config, knob))
        self._codes = codes

    @classmethod
    def full(
        cls, problem: Problem, *, families: Sequence[str], arch: str | None = None
    ) -> SearchSpace:
        """Every valid config of ``families``; for a family in CURATED_IN_FULL, beside others,
        its curated library configs only."""

        def configs_of(family: str) -> Iterable[KernelConfig]:
            if family in CURATED_IN_FULL and len(families) > 1:
                return library(family, problem.layout)
            return _layout_configs(family, problem.layout, arch)

        configs = [c for f in families for c in configs_of(f) if c.is_valid(problem, arch)]
        return cls(problem, configs)

    @classmethod
    def library(
        cls, problem: Problem, *, families: Sequence[str], arch: str | None = None
    ) -> SearchSpace:
        """The curated library configs of ``families`` that are valid for ``problem``."""

        configs = [c for f in families if f in LIBRARIES for c in library(f, problem.layout)]
        return cls.from_configs(problem, configs, arch=arch)

    @classmethod
    def from_configs(
        cls, problem: Problem, configs: Iterable[KernelConfig], *, arch: str | None = None
    ) -> SearchSpace:
        """The given configs that are valid for ``problem`` (others are dropped)."""
        kept = [c for c in configs if c.layout is problem.layout and c.is_valid(problem, arch)]
        return cls(problem, kept)

    def __len__(self) -> int:
        return len(self.configs)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def config(self, name: str) -> KernelConfig:
        return self.configs[self.by_name[name]]

    def distances(self, name: str) -> np.ndarray:
        """Number of knobs in which each member differs from ``name`` (other families: far)."""
        row = self._codes[self.by_name[name]]
        differ = (self._codes != row).sum(axis=1)
        return np.where(self._codes[:, 0] == row[0], differ, OTHER_FAMILY_DISTANCE)
