"""Kernel families: searchable configuration spaces that render CUDA sources (see base.py)."""

from __future__ import annotations

from engine.families.base import VALID, KernelConfig, Validity, invalid
from engine.families.sm80 import Sm80Config
from engine.families.sm90 import Sm90Config
from engine.families.triton import TritonConfig

FAMILIES: dict[str, type[KernelConfig]] = {
    Sm90Config.FAMILY: Sm90Config,
    Sm80Config.FAMILY: Sm80Config,
    TritonConfig.FAMILY: TritonConfig,
}


def get_family(name: str) -> type[KernelConfig]:
    """The config class of family ``name``; raises KeyError naming the known families."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown family {name!r}: expected one of {sorted(FAMILIES)}") from None


__all__ = [
    "FAMILIES",
    "VALID",
    "KernelConfig",
    "Sm80Config",
    "Sm90Config",
    "TritonConfig",
    "Validity",
    "get_family",
    "invalid",
]
