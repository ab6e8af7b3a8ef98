"""Code generation: kernel families, their searchable config spaces, and the CUDA source each
config renders from engine/cuda/templates/ (see base.py)."""

from __future__ import annotations

from engine.codegen.base import VALID, KernelConfig, Validity, invalid
from engine.codegen.longk import LongKConfig
from engine.codegen.sm80 import Sm80Config
from engine.codegen.sm90 import Sm90Config
from engine.codegen.triton import TritonConfig

FAMILIES: dict[str, type[KernelConfig]] = {
    Sm90Config.FAMILY: Sm90Config,
    Sm80Config.FAMILY: Sm80Config,
    TritonConfig.FAMILY: TritonConfig,
    LongKConfig.FAMILY: LongKConfig,
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
    "LongKConfig",
    "Sm80Config",
    "Sm90Config",
    "TritonConfig",
    "Validity",
    "get_family",
    "invalid",
]
