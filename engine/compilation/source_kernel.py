"""A kernel given as source rather than as a family config (model-written, engine.llm), and the
builder that compiles such sources as a campaign does: the candidate flags and each layout's
define, through the compile cache.

:class:`SourceKernel` quacks like engine.codegen.KernelConfig (``FAMILY``, ``name``, ``knobs()``,
``render()``, ``is_valid``) so the campaign, the finals and the bundle handle it unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from engine.codegen.base import VALID, Validity
from engine.compilation import static_checks
from engine.compilation.compile import CompileResult, compile_many, source_hash
from engine.problem import Layout, Problem

FAMILY = "llm"
DEFAULT_ARCHS = ("sm_90a",)

# (sources, layout, archs) → results in order; by default engine.compilation.compile.compile_many
Builder = Callable[[Sequence[str], Layout, tuple[str, ...]], list[CompileResult]]


@dataclass(frozen=True)
class SourceKernel:
    """A model-written candidate. ``name`` is ``llm_`` and 16 hex digits of the source's sha256
    (of ``key`` when there is no source: an answer without code still gets a record)."""

    source: str
    layout: Layout
    key: str = ""  # what names a source-less candidate (the raw answer)
    reject_reason: str = ""  # set when the proposer already knows it fails (no code, no answer)
    reject_message: str = ""
    FAMILY: ClassVar[str] = FAMILY
    ARCHS: ClassVar[tuple[str, ...]] = DEFAULT_ARCHS

    @property
    def name(self) -> str:
        digest = hashlib.sha256((self.source or f"no-code:{self.key}").encode()).hexdigest()
        return f"llm_{digest[:16]}"

    def knobs(self) -> dict[str, Any]:
        return {"layout": self.layout.value, "source_sha256": source_hash(self.source)}

    def render(self) -> str:
        return self.source

    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        return VALID  # legality is the evaluator's business

    @property
    def archs(self) -> tuple[str, ...]:
        return self.ARCHS


def default_builder(
    *, jobs: int | None = None, config: Any = None
) -> Builder:  # pragma: no cover - needs nvcc
    def build(
        sources: Sequence[str], layout: Layout, archs: tuple[str, ...]
    ) -> list[CompileResult]:
        flags = (
            f"-DGEMMFORGE_LAYOUT_TN={int(layout is Layout.TN)}",
            *static_checks.candidate_flags(),
        )
        return compile_many(sources, jobs=jobs, config=config, archs=archs, extra_flags=flags)

    return build
