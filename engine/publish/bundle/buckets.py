"""Dynamic M: per (N, K, layout), which kernel serves which range of M.

The campaign measured some Ms of an (N, K, layout) (its points). Each point has a choice: the
bundled kernel, or torch.matmul (None) where no kernel beat it. An M between two neighbouring
points goes to one of their choices:
- by the measured crossover when both choices were timed at both points: each choice's time over
  torch.matmul's, both from its own measurement session at that M, is interpolated linearly in
  log M and the boundary is where the two lines cross;
- otherwise to the nearer point on a log scale (the boundary is the geometric mean).

Outside the measured points nothing was measured, so those Ms fall back to torch.matmul. A kernel
serves only the Ms it is valid for (``serves``): a range it cannot take shrinks to its own point
and the rest goes to torch.matmul.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine.problem import ProblemError

# A choice's time over torch.matmul's at one M; torch.matmul itself (None) is 1.
Ratios = Mapping[str, float]


@dataclass(frozen=True)
class Point:
    """One measured M: the choice there and the ratios (time / torch.matmul's time, same
    session) of every kernel timed at that M."""

    m: int
    kernel: str | None
    ratios: Ratios


@dataclass(frozen=True)
class Bucket:
    """Ms in [lo, hi] (inclusive) go to ``kernel`` (None: torch.matmul), measured at ``m``."""

    lo: int
    hi: int
    m: int
    kernel: str | None


def ratio(point: Point, kernel: str | None) -> float | None:
    return 1.0 if kernel is None else point.ratios.get(kernel)


def crossover(left: Point, right: Point) -> float | None:
    """The M where the right choice starts to beat the left one, from their ratios at both
    points; None when one of the four timings is missing or the lines do not cross between."""
    a, b = left.kernel, right.kernel
    timings = (ratio(left, a), ratio(left, b), ratio(right, a), ratio(right, b))
    if any(t is None or t <= 0 for t in timings):
        return None
    la, lb, ra, rb = timings
    d_left, d_right = math.log(la / lb), math.log(ra / rb)  # < 0: the left choice is faster
    if not d_left < 0 < d_right:
        return None
    x0, x1 = math.log(left.m), math.log(right.m)
    return math.exp(x0 + (x1 - x0) * -d_left / (d_right - d_left))


def first_of_right(left: Point, right: Point) -> int:
    """The smallest M the right point's choice serves (left.m < result <= right.m)."""
    cross = crossover(left, right)
    edge = math.ceil(cross) if cross is not None else math.isqrt(left.m * right.m) + 1
    return min(max(edge, left.m + 1), right.m)


def buckets(points: Sequence[Point], serves: Callable[[str, int], bool]) -> list[Bucket]:
    """Sorted, disjoint buckets covering [min measured M, max measured M]; ``serves(kernel, m)``:
    whether the kernel is valid for M = m."""
    ordered = sorted(points, key=lambda p: p.m)
    if len({p.m for p in ordered}) != len(ordered):
        raise ValueError("two points at the same M")
    out: list[Bucket] = []
    for i, point in enumerate(ordered):
        lo = point.m if i == 0 else first_of_right(ordered[i - 1], point)
        hi = point.m if i == len(ordered) - 1 else first_of_right(point, ordered[i + 1]) - 1
        if point.kernel is None or (serves(point.kernel, lo) and serves(point.kernel, hi)):
            out.append(Bucket(lo, hi, point.m, point.kernel))
            continue
        if lo < point.m:
            out.append(Bucket(lo, point.m - 1, point.m, None))
        out.append(Bucket(point.m, point.m, point.m, point.kernel))
        if point.m < hi:
            out.append(Bucket(point.m + 1, hi, point.m, None))
    return merged(out)


def merged(sorted_buckets: Sequence[Bucket]) -> list[Bucket]:
    """Adjacent torch.matmul buckets joined (a kernel's bucket keeps its own measured M)."""
    out: list[Bucket] = []
    for b in sorted_buckets:
        if out and b.kernel is None and out[-1].kernel is None and out[-1].hi + 1 == b.lo:
            out[-1] = Bucket(out[-1].lo, b.hi, out[-1].m, None)
        else:
            out.append(b)
    return out


def expand_shapes(text: str) -> list[str]:
    """Comma-separated shapes, where ``M=lo..hi:NxK`` stands for MxNxK at every power of two
    M in [lo, hi] and at lo and hi themselves (the Ms a dynamic-M bundle's buckets are drawn
    between): ``M=1..8192:4096x4096`` is 14 shapes. Other items pass through as written."""

    out: list[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item.startswith(("M=", "m=")):
            if item:
                out.append(item)
            continue
        span, _, nk = item[2:].partition(":")
        lo_text, dots, hi_text = span.partition("..")
        if not (dots and lo_text.isdigit() and hi_text.isdigit() and nk):
            raise ProblemError(
                f"bad M range {item!r}: expected M=lo..hi:NxK, e.g. M=1..8192:4096x4096"
            )
        lo, hi = int(lo_text), int(hi_text)
        if not 1 <= lo <= hi:
            raise ProblemError(f"bad M range {item!r}: need 1 <= lo <= hi")
        ms = sorted({lo, hi} | {1 << e for e in range(hi.bit_length()) if lo <= 1 << e <= hi})
        out.extend(f"{m}x{nk}" for m in ms)
    return out
