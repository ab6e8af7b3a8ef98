"""The problem model: one HGEMM shape and operand layout.

C (M×N) = A (M×K) · B, fp16 inputs and output, fp32 accumulation, every matrix row-major.

Layouts (named as torch users meet them):
  NN  B is K×N row-major, as ``torch.matmul(a, b)`` takes it.
  TN  B is N×K row-major, as ``nn.Linear`` stores its weight (``x @ w.T``).

Alignment rules: N and K must be multiples of 8, so that every row of A, B and C starts on a
16-byte boundary (the width of cp.async / TMA / vector loads); M may be any positive value.
Sizes are capped so that A, B and C together fit in ``MAX_OPERAND_BYTES``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

ELEMENT_BYTES = 2  # fp16
ALIGN_ELEMENTS = 8  # 16 bytes of fp16
MAX_DIM = 1 << 20
MAX_OPERAND_BYTES = 48 << 30  # A + B + C; leaves room on a 80 GB card for guard bands and refs

_SHAPE_RE = re.compile(r"^([0-9]+)x([0-9]+)x([0-9]+)$")


class ProblemError(ValueError):
    """A problem specification that cannot be run; the message says what to change."""


class Layout(StrEnum):
    NN = "nn"
    TN = "tn"

    @classmethod
    def parse(cls, text: str) -> Layout:
        value = text.strip().lower() if isinstance(text, str) else text
        for layout in cls:
            if layout.value == value:
                return layout
        raise ProblemError(f"unknown layout {text!r}: expected one of nn, tn")


@dataclass(frozen=True, slots=True)
class Problem:
    m: int
    n: int
    k: int
    layout: Layout = Layout.NN

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            check_dimension(name.upper(), getattr(self, name))
        if not isinstance(self.layout, Layout):
            object.__setattr__(self, "layout", Layout.parse(self.layout))
        for name in ("n", "k"):
            value = getattr(self, name)
            if value % ALIGN_ELEMENTS:
                raise ProblemError(
                    f"{name.upper()}={value} must be a multiple of {ALIGN_ELEMENTS} so that every "
                    f"row starts on a 16-byte boundary; nearest valid values are "
                    f"{_round_down(value)} and {_round_up(value)}"
                )
        if self.operand_bytes > MAX_OPERAND_BYTES:
            raise ProblemError(
                f"{self.shape} needs {self.operand_bytes / 2**30:.1f} GiB for A, B and C, over the "
                f"{MAX_OPERAND_BYTES / 2**30:.0f} GiB limit"
            )

    @classmethod
    def parse(cls, shape: str, layout: str | Layout = Layout.NN) -> Problem:
        """Parse ``"MxNxK"`` (plain ASCII digits, no signs, separators or decimals)."""
        if not isinstance(shape, str):
            raise ProblemError(
                f"shape must be text like 4096x4096x4096, got {type(shape).__name__}"
            )
        text = shape.strip().lower()
        match = _SHAPE_RE.match(text) if text.isascii() else None
        if match is None:
            raise ProblemError(
                f"cannot read shape {shape!r}: write it as MxNxK with plain digits, "
                "e.g. 4096x4096x1024"
            )
        m, n, k = (int(g) for g in match.groups())
        return cls(m, n, k, Layout.parse(layout) if isinstance(layout, str) else layout)

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def key(self) -> str:
        """Stable identifier, e.g. ``4096x4096x4096_tn``."""
        return f"{self.shape}_{self.layout.value}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def operand_bytes(self) -> int:
        """Fewest bytes a kernel must move: A and B read once, C written once."""
        return ELEMENT_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n)

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.layout is Layout.NN else (self.n, self.k)

    def features(self) -> dict[str, float]:
        """Problem features for learned models (log2 sizes, aspect ratios, layout)."""
        lm, ln, lk = math.log2(self.m), math.log2(self.n), math.log2(self.k)
        return {
            "log2_m": lm,
            "log2_n": ln,
            "log2_k": lk,
            "log2_mn_over_k": lm + ln - 2 * lk,
            "log2_m_over_n": lm - ln,
            "log2_flops": math.log2(self.flops),
            "layout_tn": 1.0 if self.layout is Layout.TN else 0.0,
        }

    def __str__(self) -> str:
        return self.key


def check_dimension(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProblemError(f"{name} must be a whole number, got {value!r}")
    if value <= 0:
        raise ProblemError(f"{name} must be positive, got {value}")
    if value > MAX_DIM:
        raise ProblemError(f"{name}={value} is over the limit of {MAX_DIM}")
    return value


def _round_down(value: int) -> int:
    return max(ALIGN_ELEMENTS, value - value % ALIGN_ELEMENTS)


def _round_up(value: int) -> int:
    return value + (-value) % ALIGN_ELEMENTS
