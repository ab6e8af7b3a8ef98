"""The comment block in which a CUDA source carries a Triton kernel and how to compile it::

    /* gemmforge-triton
    {"kernel": "hgemm", "signature": {...}, "constexprs": {...}, "num_warps": 4,
     "num_stages": 3, "aligned": ["A", "B", "C"]}
    ---
    <Python source defining the @triton.jit kernel>
    gemmforge-triton */

The Triton family (engine.codegen.triton) renders it; engine.compilation.triton_aot compiles
from it.
Pure parsing: importable without Triton.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MARKER = "/* gemmforge-triton\n"
END = "\ngemmforge-triton */"
SEPARATOR = "\n---\n"


class TritonSourceError(ValueError):
    """A source whose embedded Triton block is missing or malformed."""


@dataclass(frozen=True)
class TritonSpec:
    """What to compile: the kernel's name in the Python source, its signature (parameter →
    Triton type, ``constexpr`` for compile-time ones), the constexpr values, the pointer
    parameters known to be 16-byte aligned, and the launch's warps and pipeline stages."""

    kernel: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    aligned: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "kernel": self.kernel,
                "signature": self.signature,
                "constexprs": self.constexprs,
                "num_warps": self.num_warps,
                "num_stages": self.num_stages,
                "aligned": list(self.aligned),
            },
            separators=(", ", ": "),
        )

    @classmethod
    def from_json(cls, text: str) -> TritonSpec:
        try:
            data = json.loads(text)
            return cls(
                kernel=str(data["kernel"]),
                signature={str(k): str(v) for k, v in data["signature"].items()},
                constexprs=dict(data.get("constexprs", {})),
                num_warps=int(data["num_warps"]),
                num_stages=int(data["num_stages"]),
                aligned=tuple(str(a) for a in data.get("aligned", ())),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TritonSourceError(f"bad gemmforge-triton spec: {exc}") from None


def is_triton_source(source: str) -> bool:
    """Whether ``source`` embeds a Triton kernel (and so needs this module to build)."""
    return MARKER in source


def embed(spec: TritonSpec, python: str) -> str:
    """The comment block that carries ``python`` and ``spec`` inside a .cu source."""
    if "*/" in python:
        raise TritonSourceError("the Triton source may not contain '*/' (it ends the C comment)")
    return f"{MARKER}{spec.to_json()}{SEPARATOR}{python.rstrip()}{END}"


def extract(source: str) -> tuple[TritonSpec, str]:
    """The spec and the Python source embedded in ``source``; TritonSourceError if malformed."""
    start = source.find(MARKER)
    if start < 0:
        raise TritonSourceError("no gemmforge-triton block in the source")
    body_start = start + len(MARKER)
    end = source.find(END, body_start)
    if end < 0:
        raise TritonSourceError("the gemmforge-triton block is not closed")
    spec_text, separator, python = source[body_start:end].partition(SEPARATOR)
    if not separator:
        raise TritonSourceError("the gemmforge-triton block has no '---' after its spec")
    return TritonSpec.from_json(spec_text), python + "\n"
