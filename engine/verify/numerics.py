"""Numerical checks on kernel outputs (torch tensors, on the CPU or the GPU).

Every check is written so that NaN fails it: ``ok = isfinite(x).all() & (err <= tol).all()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Calibrated tolerance: a candidate's relative Frobenius error on N(0,1) inputs may be at most
# this many times cuBLAS's own error on the same inputs (cuBLAS, fp32 compute: ~2.1e-4 on an
# H200; fp16 accumulation: ~1.2e-3 at 1024^3, measured). The floor covers tiny K where both are
# dominated by the final rounding to fp16.
TOLERANCE_FACTOR = 2.0
TOLERANCE_FLOOR = 1.0e-5
MAX_ULP = 1.0  # U[0,1) inputs: fp32 accumulation stays within 0.5 ulp plus fp32 rounding
FP16_MAX = 65504.0


def relative_frobenius_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; inf when ``out`` holds a non-finite value."""
    out64, ref64 = out.double(), ref.double()
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    denominator = float(torch.linalg.vector_norm(ref64))
    return float(torch.linalg.vector_norm(out64 - ref64)) / max(denominator, 1e-30)


def calibrated_tolerance(library_error: float) -> float:
    return max(TOLERANCE_FACTOR * library_error, TOLERANCE_FLOOR)


def fp16_ulp(ref: torch.Tensor) -> torch.Tensor:
    """Size of one fp16 unit in the last place at each value of ``ref`` (float32 result)."""
    magnitude = ref.float().abs().clamp(min=2.0**-14)  # subnormals share the smallest normal ulp
    exponent = torch.floor(torch.log2(magnitude))
    # log2 can land one below an exact power of two; the half-rounded value settles it
    rounded = ref.half().float().abs().clamp(min=2.0**-14)
    exponent = torch.maximum(exponent, torch.floor(torch.log2(rounded)))
    return torch.exp2(exponent - 10.0)


def ulp_errors(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|out − ref| in fp16 ulps of the exact value (inf where ``out`` is not finite)."""
    diff = (out.float() - ref.float()).abs()
    errors = diff / fp16_ulp(ref)
    return torch.where(torch.isfinite(out.float()), errors, torch.full_like(errors, float("inf")))


@dataclass(frozen=True, slots=True)
class UlpReport:
    max_ulp: float
    fraction_over: float  # share of elements above MAX_ULP

    @property
    def ok(self) -> bool:
        return self.max_ulp <= MAX_ULP


def ulp_report(out: torch.Tensor, ref: torch.Tensor) -> UlpReport:
    errors = ulp_errors(out, ref)
    over = errors > MAX_ULP
    return UlpReport(max_ulp=float(errors.max()), fraction_over=float(over.float().mean()))


def exact_mismatches(out: torch.Tensor, ref: torch.Tensor) -> int:
    """Elements where ``out`` differs from ``ref`` rounded once to fp16 (NaN always differs)."""
    expected = ref.half()
    return int((out != expected).sum())


def nonfinite_count(out: torch.Tensor) -> int:
    return int((~torch.isfinite(out)).sum())


def simulate_fp16_accumulation(a: torch.Tensor, b: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """What a kernel with fp16 accumulators computes: fp32 chunks of ``chunk`` along K, summed
    in fp16. Used by tests to show the checks reject it."""
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16, device=a.device)
    for k0 in range(0, a.shape[1], chunk):
        part = a[:, k0 : k0 + chunk].float() @ b[k0 : k0 + chunk, :].float()
        total = (total.float() + part.half().float()).half()
    return total
