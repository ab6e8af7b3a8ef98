"""Physical limits: a time below what the hardware can do is a cheat or a broken timer."""

from __future__ import annotations

from dataclasses import dataclass

from engine.problem import Problem


@dataclass(frozen=True, slots=True)
class GpuPeaks:
    """Vendor datasheet ceilings (dense fp16 tensor FLOP/s, HBM bytes/s): upper bounds."""

    name: str
    fp16_tensor_flops: float
    memory_bytes_per_s: float
    launch_floor_s: float = 1.0e-6


PEAKS = {
    "H200": GpuPeaks("H200", 989.4e12, 4.8e12),
    "H100 SXM": GpuPeaks("H100 SXM", 989.4e12, 3.35e12),
    "H100 PCIe": GpuPeaks("H100 PCIe", 756.0e12, 2.0e12),
    "A100": GpuPeaks("A100", 312.0e12, 2.04e12),
    "RTX 3090": GpuPeaks("RTX 3090", 142.0e12, 0.936e12),
}
# For an unknown GPU: generous enough that no real kernel of today falls below it.
UNKNOWN = GpuPeaks("unknown", 2.5e15, 10.0e12, 0.5e-6)


def peaks_for(gpu_name: str) -> GpuPeaks:
    name = gpu_name.upper()
    if "H200" in name:
        return PEAKS["H200"]
    if "H100" in name:
        return PEAKS["H100 PCIe"] if "PCIE" in name else PEAKS["H100 SXM"]
    if "A100" in name:
        return PEAKS["A100"]
    if "3090" in name:
        return PEAKS["RTX 3090"]
    return UNKNOWN


def floor_seconds(problem: Problem, peaks: GpuPeaks) -> float:
    """No correct kernel can finish ``problem`` faster than this on that GPU."""
    return max(
        problem.flops / peaks.fp16_tensor_flops,
        problem.operand_bytes / peaks.memory_bytes_per_s,
        peaks.launch_floor_s,
    )


def is_impossible(seconds: float, problem: Problem, peaks: GpuPeaks) -> bool:
    return seconds < floor_seconds(problem, peaks)


def tflops(problem: Problem, seconds: float) -> float:
    return problem.flops / seconds / 1e12 if seconds > 0 else 0.0
