"""Speedups a user can trust: one rule, stated once.

A speedup is a baseline's time divided by a kernel's time *taken in the same measurement session*:
the same process, GPU environment and protocol, the baseline's NN and TN calls timed beside the
kernel. A search round's kernel time over the final re-measurement's baseline time is not a
speedup, and this module never forms one: a ``Session`` carries its kernel time together with the
baseline times taken with it, and a ratio is only ever made inside one session. Where no session
pairs a kernel with a baseline there is a time and no ratio.

A ratio whose interval holds 1.0 is a tie, not a win or a loss. The interval comes from the
recorded interquartile ranges of the two times; where a session kept none, from the run-to-run
spread measured for its protocol on its GPU (MEASURED_SPREAD, from bench/NOTES.md); where neither
was measured, a ratio has no verdict (UNMEASURED): ×1.0001 is never counted as faster.

The per-shape choice (``choose``) and the campaign headline (``headline``) are here too, so the
dashboard, its downloads, the bundle and ``engine report`` all show the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.timing.baseline_names import BASELINES

FASTER, TIED, SLOWER = "faster", "tied", "slower"
UNMEASURED = "unmeasured"  # no interval kept and no spread measured: no verdict
VERDICTS = (FASTER, TIED, SLOWER, UNMEASURED)
REWARD_BASELINE = "cublaslt_autotune"
# A final re-measurement (longer runs, kernels not chosen on its own samples) is preferred over
# the search round that found the kernel, and that over an imported sweep.
SESSION_ORDER = ("final", "search", "sweep")
EQUAL = 1e-9  # relative: times this close are the same reading
# The run-to-run spread of one runner's median time, measured on a GPU model in a protocol: what
# a session that kept no quartiles is judged with (a ratio within it of 1 is a tie). H200 device
# protocol: ≤ 1.96 % over three runs on 11 of 12 shapes (bench/NOTES.md §2), ≤ 1.73 % on every
# shape ≥ 1024³ but one (§6), 1.19 % at the worst shape once runs last ≥ 1 s (§7, run 10).
# No other GPU or protocol has had its spread measured.
MEASURED_SPREAD: dict[tuple[str, str], float] = {("device", "H200"): 0.02}
NOISE_QUARTILES = "interquartile interval"
NOISE_NONE = "no noise measured"


def measured_spread(protocol: str, gpu: str) -> float | None:
    """The spread MEASURED_SPREAD holds for ``protocol`` on ``gpu`` (a GPU name such as
    "NVIDIA H200": matched by its model), or None when none was measured."""
    words = gpu.upper().replace("-", " ").split()
    for (measured_protocol, model), spread in MEASURED_SPREAD.items():
        if measured_protocol == protocol and model in words:
            return spread
    return None


def spread_label(spread: float) -> str:
    return f"run-to-run spread {spread:.0%} measured for this protocol and GPU"


@dataclass(frozen=True)
class Timing:
    """One runner's time in one session, with its interquartile range where it was kept."""

    seconds: float
    p25: float | None = None
    p75: float | None = None

    @classmethod
    def of(cls, value: Any) -> Timing | None:
        """From a bare number of seconds or a mapping with ``seconds``/``median_s`` (and
        optional ``p25``, ``p75``); None when there is no positive time."""
        if isinstance(value, Mapping):
            seconds = value.get("seconds", value.get("median_s"))
            p25, p75 = value.get("p25"), value.get("p75")
        else:
            seconds, p25, p75 = value, None, None
        if not isinstance(seconds, int | float) or not seconds > 0:
            return None
        quartiles = isinstance(p25, int | float) and isinstance(p75, int | float) and p25 > 0
        if not quartiles:
            return cls(float(seconds))
        return cls(float(seconds), float(p25), float(p75))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, float]:
        out = {"seconds": self.seconds}
        if self.p25 is not None and self.p75 is not None:
            out.update(p25=self.p25, p75=self.p75)
        return out


@dataclass(frozen=True)
class Ratio:
    """baseline / kernel in one session; ``low``–``high``: its interval, from the quartiles when
    kept, else from the measured spread; ``noise`` says which (or that none was measured)."""

    value: float
    low: float | None
    high: float | None
    verdict: str
    noise: str = NOISE_QUARTILES

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "verdict": self.verdict,
            "noise": self.noise,
        }


def ratio(baseline: Timing, kernel: Timing, *, spread: float | None = None) -> Ratio:
    """The ratio and its verdict; ``spread``: the measured run-to-run spread of one runner's
    time, used where either time kept no quartiles."""
    value = baseline.seconds / kernel.seconds
    if None not in (baseline.p25, baseline.p75, kernel.p25, kernel.p75):
        low = baseline.p25 / kernel.p75  # type: ignore[operator]
        high = baseline.p75 / kernel.p25  # type: ignore[operator]
        noise = NOISE_QUARTILES
    elif spread is not None:
        low, high, noise = value / (1 + spread), value * (1 + spread), spread_label(spread)
    else:
        low = high = None
        noise = NOISE_NONE
    if abs(value - 1.0) <= EQUAL or (low is not None and high is not None and low <= 1 <= high):
        verdict = TIED
    elif low is None:
        verdict = UNMEASURED
    else:
        verdict = FASTER if value > 1 else SLOWER
    return Ratio(value, low, high, verdict, noise)


@dataclass(frozen=True)
class Session:
    """A kernel's time and the baselines' times taken with it (best of each one's layouts)."""

    name: str  # "final", "search" or "sweep"
    protocol: str
    kernel: Timing
    baselines: Mapping[str, Timing]
    environment: str = ""  # the GPU's name, or the caller's id of its environment
    # the measured spread its times are judged with where they kept no quartiles; None: the
    # one MEASURED_SPREAD holds for its protocol and ``environment`` (when that names a GPU)
    spread: float | None = None

    def noise_spread(self) -> float | None:
        if self.spread is not None:
            return self.spread
        return measured_spread(self.protocol, self.environment)

    def ratios(self) -> dict[str, Ratio]:
        spread = self.noise_spread()
        return {b: ratio(t, self.kernel, spread=spread) for b, t in sorted(self.baselines.items())}

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "protocol": self.protocol,
            "kernel": self.kernel.to_dict(),
            "baselines": {b: t.to_dict() for b, t in sorted(self.baselines.items())},
            "environment": self.environment,
        }
        if self.spread is not None:
            out["spread"] = self.spread
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Session | None:
        kernel = Timing.of(data.get("kernel"))
        if kernel is None:
            return None
        return cls(
            name=str(data.get("name", "search")),
            protocol=str(data.get("protocol", "device")),
            kernel=kernel,
            baselines=baseline_timings(data.get("baselines") or {}),
            environment=str(data.get("environment") or ""),
            spread=spread if isinstance(spread := data.get("spread"), int | float) else None,
        )


def baseline_runner(baseline: str, best: Mapping[str, Any]) -> str:
    """The runner whose time an engine.timing.baselines.best_of_layouts entry took (its layout; the
    heuristic's pick where that stood in for cuBLASLt-autotune)."""
    layout = best.get("layout", "nn")
    if best.get("choice") == "heuristic":
        return f"cublaslt_heuristic_{layout}"
    return f"{baseline}_{layout}"


def quartiles(stats: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Runner → {"p25", "p75"} from a protocol's per-runner statistics (engine.stats)."""
    return {
        name: {"p25": float(s["p25"]), "p75": float(s["p75"])}
        for name, s in stats.items()
        if isinstance(s, Mapping)
        and isinstance(s.get("p25"), int | float)
        and isinstance(s.get("p75"), int | float)
    }


def with_quartiles(
    seconds: float, runner: str, kept: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """{"seconds"} and, where ``kept`` has the runner's, its p25 and p75."""
    return {"seconds": seconds, **kept.get(runner, {})}


def baseline_timings(values: Mapping[str, Any]) -> dict[str, Timing]:
    """Baseline → Timing from a mapping of numbers or timing mappings (unusable ones dropped)."""
    out = {b: Timing.of(v) for b, v in values.items()}
    return {b: t for b, t in out.items() if t is not None}


def preferred(sessions: Sequence[Session]) -> Session | None:
    """The session whose ratios a kernel is shown with: one that timed baselines, the earliest
    in SESSION_ORDER; None when no session paired the kernel with a baseline."""
    paired = [s for s in sessions if s.baselines]
    rank = {name: i for i, name in enumerate(SESSION_ORDER)}
    return min(paired, key=lambda s: rank.get(s.name, len(rank)), default=None)


@dataclass(frozen=True)
class Choice:
    """One shape's kernel and the session its numbers come from."""

    kernel: str
    session: Session
    key: Any = None  # the caller's id of the kernel (a candidate id)

    def ratios(self) -> dict[str, Ratio]:
        return self.session.ratios()


def rank(
    kernels: Sequence[tuple[str, Any, Sequence[Session]]],
    *,
    protocol: str = "device",
    baseline: str = REWARD_BASELINE,
) -> list[Choice]:
    """Of ``(name, key, sessions)``, the kernels a shape may be credited with, best first: by
    their ratio over ``baseline`` in ``protocol`` (over the baseline most sessions timed, where
    none timed ``baseline``), compared only among kernels shown with the same kind of session
    (finals when any kernel has one: they were timed side by side). A kernel with no paired
    session is never ranked (it has no ratio to be ranked on)."""
    shown = []
    for name, key, sessions in kernels:
        session = preferred([s for s in sessions if s.protocol == protocol])
        if session is not None:
            shown.append(Choice(name, session, key))
    if not shown:
        return []
    order = {name: i for i, name in enumerate(SESSION_ORDER)}
    top = min(order.get(c.session.name, len(order)) for c in shown)
    pool = [c for c in shown if order.get(c.session.name, len(order)) == top]
    timed = [b for c in pool for b in c.session.baselines]
    on = baseline if baseline in timed else max(sorted(set(timed)), key=timed.count)
    pool = [c for c in pool if on in c.session.baselines]
    # exact ties go to the first name, as the finals' choice breaks them
    return sorted(pool, key=lambda c: (-c.ratios()[on].value, c.session.kernel.seconds, c.kernel))


def choose(
    kernels: Sequence[tuple[str, Any, Sequence[Session]]],
    *,
    protocol: str = "device",
    baseline: str = REWARD_BASELINE,
) -> Choice | None:
    """The shape's kernel: the first of :func:`rank`."""
    ranked = rank(kernels, protocol=protocol, baseline=baseline)
    return ranked[0] if ranked else None


# -- the campaign headline ---------------------------------------------------------------------
@dataclass(frozen=True)
class ShapeBest:
    """A shape's chosen kernel, as the headline reads it."""

    shape: str  # e.g. 4096x4096x4096_nn
    flops: float
    choice: Choice

    @property
    def tflops(self) -> float:
        return self.flops / self.choice.session.kernel.seconds / 1e12

    def fastest_tflops(self) -> float:
        """The highest rate any runner of the session reached (ours or a library's)."""
        times = [self.choice.session.kernel.seconds]
        times += [t.seconds for t in self.choice.session.baselines.values()]
        return self.flops / min(times) / 1e12


@dataclass(frozen=True)
class BaselineSummary:
    baseline: str
    shapes: int
    geomean: float
    counts: dict[str, int]  # verdict → shapes

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "shapes": self.shapes,
            "geomean": self.geomean,
            **{v: self.counts.get(v, 0) for v in VERDICTS},
        }


@dataclass(frozen=True)
class Headline:
    """A campaign at a glance, in one protocol (the device protocol by default)."""

    protocol: str
    shapes: int  # shapes with a chosen kernel
    without: int  # shapes without one (nothing timed beside a baseline yet)
    baselines: list[BaselineSummary] = field(default_factory=list)
    worst: tuple[str, float] | None = None  # shape, ratio over REWARD_BASELINE
    best: tuple[str, str, float] | None = None  # shape, kernel, TFLOP/s
    ceiling: tuple[str, float] | None = None  # shape, the highest TFLOP/s any runner reached

    @property
    def ceiling_fraction(self) -> float | None:
        if self.best is None or self.ceiling is None or self.ceiling[1] <= 0:
            return None
        return self.best[2] / self.ceiling[1]

    def summary(self, baseline: str) -> BaselineSummary | None:
        return next((s for s in self.baselines if s.baseline == baseline), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "shapes": self.shapes,
            "shapes_without_ratio": self.without,
            "baselines": [s.to_dict() for s in self.baselines],
            "worst": _named(("shape", "speedup"), self.worst),
            "best": _named(("shape", "kernel", "tflops"), self.best),
            "ceiling": _named(("shape", "tflops"), self.ceiling),
            "ceiling_fraction": self.ceiling_fraction,
        }

    def markdown(self, labels: Mapping[str, str]) -> list[str]:
        """The headline block (the bundle README and ``engine report`` open with it)."""
        if not self.baselines:
            return [f"No kernel timed beside a baseline yet ({self.protocol} protocol).", ""]
        unmeasured = sum(s.counts.get(UNMEASURED, 0) for s in self.baselines)
        lines = [
            f"**{self.shapes} shapes, {self.protocol} protocol** (speedup = baseline time / "
            "kernel time in the same session; a tie: the interval holds 1, from the interquartile "
            "ranges, or from the spread measured for the protocol on the GPU where the run kept "
            "none)",
            "",
            "| vs | geomean | faster | tied | slower |"
            + (" no noise measured |" if unmeasured else ""),
            "|---|---|---|---|---|" + ("---|" if unmeasured else ""),
        ]
        for s in self.baselines:
            lines.append(
                f"| {labels.get(s.baseline, s.baseline)} | {s.geomean:.3f} | "
                f"{s.counts.get(FASTER, 0)} | {s.counts.get(TIED, 0)} | {s.counts.get(SLOWER, 0)} |"
                + (f" {s.counts.get(UNMEASURED, 0)} |" if unmeasured else "")
            )
        if unmeasured:
            lines += [
                "",
                "No noise was measured for some of these ratios (the run kept no quartiles and no "
                "spread is known for its protocol on its GPU): they have no verdict and are not "
                "counted as faster, tied or slower.",
            ]
        lines.append("")
        if self.worst is not None:
            label = labels.get(REWARD_BASELINE, REWARD_BASELINE)
            lines.append(f"Worst shape vs {label}: {self.worst[0]} at {self.worst[1]:.3f}.")
        if self.best is not None and self.ceiling is not None:
            lines.append(
                f"Best kernel: {self.best[2]:.1f} TFLOP/s at {self.best[0]} (`{self.best[1]}`), "
                f"{self.ceiling_fraction:.0%} of the highest rate measured for any runner "
                f"({self.ceiling[1]:.1f} TFLOP/s at {self.ceiling[0]})."
            )
        if self.without:
            lines.append(f"{self.without} shape(s) have no kernel timed beside a baseline yet.")
        return [*lines, ""]


def _named(names: tuple[str, ...], values: tuple[Any, ...] | None) -> dict[str, Any] | None:
    return None if values is None else dict(zip(names, values, strict=True))


def geomean(values: Sequence[float]) -> float:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def headline(
    bests: Sequence[ShapeBest],
    *,
    protocol: str = "device",
    without: int = 0,
    baselines: Sequence[str] = BASELINES,
) -> Headline:
    """Geomean and faster/tied/slower counts over each baseline, the worst shape over
    REWARD_BASELINE, the best kernel's TFLOP/s and the highest rate any runner of those sessions
    reached (the measured ceiling)."""
    per_shape = [b.choice.ratios() for b in bests]  # once per shape: 1000 shapes, 4 baselines
    summaries = []
    for baseline in baselines:
        ratios = [r for found in per_shape if (r := found.get(baseline)) is not None]
        if ratios:
            counts = {v: sum(r.verdict == v for r in ratios) for v in VERDICTS}
            if not counts[UNMEASURED]:
                del counts[UNMEASURED]  # the usual case: every ratio had its noise measured
            summaries.append(
                BaselineSummary(baseline, len(ratios), geomean([r.value for r in ratios]), counts)
            )
    reward = [
        (b.shape, r.value)
        for b, found in zip(bests, per_shape, strict=True)
        if (r := found.get(REWARD_BASELINE)) is not None
    ]
    worst = min(reward, key=lambda pair: pair[1]) if reward else None
    top = max(bests, key=lambda b: b.tflops, default=None)
    roof = max(bests, key=lambda b: b.fastest_tflops(), default=None)
    return Headline(
        protocol=protocol,
        shapes=len(bests),
        without=without,
        baselines=summaries,
        worst=worst,
        best=None if top is None else (top.shape, top.choice.kernel, top.tflops),
        ceiling=None if roof is None else (roof.shape, roof.fastest_tflops()),
    )
