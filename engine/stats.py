"""Timing statistics: robust summaries and the stopping rule for repeated measurements."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class TimingStats:
    """Summary of per-call times in seconds."""

    n: int
    median: float
    mean: float
    minimum: float
    maximum: float
    p10: float
    p25: float
    p75: float
    p90: float

    @property
    def rel_iqr(self) -> float:
        return (self.p75 - self.p25) / self.median if self.median > 0 else math.inf

    @property
    def rel_se_median(self) -> float:
        """Relative standard error of the median, from the IQR (robust to outliers)."""
        return relative_se_of_median_from(self.p25, self.p75, self.median, self.n)

    def to_dict(self) -> dict[str, float]:
        data: dict[str, float] = asdict(self)
        data["rel_iqr"] = self.rel_iqr
        data["rel_se_median"] = self.rel_se_median
        return data


def quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples (numpy's default method)."""
    if not sorted_samples:
        raise ValueError("no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    position = q * (len(sorted_samples) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_samples) - 1)
    fraction = position - low
    return sorted_samples[low] * (1 - fraction) + sorted_samples[high] * fraction


def summarize(samples: Sequence[float]) -> TimingStats:
    ordered = sorted(samples)
    return TimingStats(
        n=len(ordered),
        median=quantile(ordered, 0.5),
        mean=statistics.fmean(ordered),
        minimum=ordered[0],
        maximum=ordered[-1],
        p10=quantile(ordered, 0.1),
        p25=quantile(ordered, 0.25),
        p75=quantile(ordered, 0.75),
        p90=quantile(ordered, 0.9),
    )


def relative_se_of_median_from(p25: float, p75: float, median: float, n: int) -> float:
    if n < 2 or median <= 0:
        return math.inf
    sigma = (p75 - p25) / 1.349  # IQR of a normal distribution is 1.349 sigma
    return 1.2533 * sigma / math.sqrt(n) / median


def converged(samples: Sequence[float], *, min_samples: int, target_rel_se: float) -> bool:
    """True once there are enough samples and the median is known to ``target_rel_se``."""
    if len(samples) < min_samples:
        return False
    return summarize(samples).rel_se_median <= target_rel_se


def spread_between_runs(medians: Sequence[float]) -> float:
    """Run-to-run spread: (max - min) / median of the per-run medians."""
    if len(medians) < 2:
        return 0.0
    ordered = sorted(medians)
    return (ordered[-1] - ordered[0]) / quantile(ordered, 0.5)
