"""The verifier's checks inside the timing protocols (engine.timing.protocols): the decisions,
without the GPU.

A kernel is rewarded for its time in the timing protocols, so the checks follow it there:

- every timed call gets inputs no call saw before (the next of several operand sets, filled with
  new values) and a C poisoned with NaN, both written before the timed interval: a kernel that
  fingerprints its inputs (or C) and replays an earlier answer has nothing to replay;
- a random sample of each runner's calls, unknown to the kernel and spread over the whole
  protocol, is *checked*: the caller's stream is held while the inputs are written and the call
  is made (work that escapes the stream reads stale inputs), C is copied on the caller's stream
  when the call's work there ends and compared with C after a device-wide sync (work finishing
  later is ``stream_escape``), and C's error is checked at the verification tolerance;
- another sample is *probed*: host-synchronised, the time from the caller's stream's completion
  to the device's idle is compared with the baselines' (work outside the caller's stream shows
  as a longer tail: ``stream_escape``).

Sampled calls are left out of the statistics. This module holds the sampling plan, the rules and
the records; engine.timing.protocols runs the calls.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from engine.outcomes import Reason
from engine.problem import Problem
from engine.stats import quantile

# Per runner and protocol: checked and probed calls planned among the protocol's first reps,
# then each later call is sampled with SAMPLE_RATE (a kernel that turns after N calls is checked
# while it misbehaves), up to MOST_EXTRA more of each.
CHECKS = 3
PROBES = 6
SAMPLE_RATE = 1 / 64
MOST_EXTRA = 6
MAX_OPERAND_SETS = 8
PROJECTION_COLUMNS = 16  # Gaussian columns of the projected error estimate (CheckRecord)
# A runner's stream tail may exceed the baselines' median by this many of their IQRs, and at
# least STREAM_SLACK_FLOOR_S (twice the launch floor of engine.timing.physics: less escaped
# work than that gains less than a launch costs), before it is a stream escape.
STREAM_SLACK_IQRS = 4.0
STREAM_SLACK_FLOOR_S = 2.0e-6
# Runners the checks leave alone: cuBLASLt's algorithms while the autotuning picks one (library
# code; the picked one is checked as the cublaslt_autotune baseline).
UNCHECKED_KINDS = frozenset({"cublaslt_candidate"})
# engine.timing.baselines.candidate_runner; every other kind is a baseline
CANDIDATE_KIND = "candidate"
CHECK, PROBE = "check", "probe"


def operand_set_bytes(problem: Problem) -> int:
    """One operand set: A, B in both layouts and C, fp16."""
    m, n, k = problem.m, problem.n, problem.k
    return 2 * (m * k + 2 * k * n + m * n)


def operand_set_count(problem: Problem, budget_bytes: int, most: int = MAX_OPERAND_SETS) -> int:
    """How many operand sets rotate: as many as fit ``budget_bytes`` (the L2 flush buffer's
    size), at least 2 (two consecutive calls never share a buffer) and at most ``most``."""
    return max(2, min(most, budget_bytes // max(1, operand_set_bytes(problem))))


def plan_samples(
    names: Sequence[str], reps: int, *, checks: int, probes: int, rng: random.Random
) -> dict[str, dict[int, str]]:
    """For each runner, which of the first ``reps`` reps are checked and which probed (distinct
    reps, drawn at random; at most half of them, so that every runner keeps timed calls)."""
    plan: dict[str, dict[int, str]] = {}
    for name in names:
        chosen = rng.sample(range(reps), min(reps // 2, checks + probes))
        plan[name] = {rep: CHECK if i < checks else PROBE for i, rep in enumerate(chosen)}
    return plan


class Sampler:
    """Which calls of a protocol are checked or probed (see the module's docstring)."""

    def __init__(
        self,
        names: Sequence[str],
        rng: random.Random,
        *,
        first_reps: int,
        checks: int = CHECKS,
        probes: int = PROBES,
        rate: float = SAMPLE_RATE,
        most_extra: int = MOST_EXTRA,
    ) -> None:
        self.rng = rng
        self.first_reps = first_reps
        self.rate = rate
        self.most_extra = most_extra
        self.plan = plan_samples(names, first_reps, checks=checks, probes=probes, rng=rng)
        self.extra: dict[str, dict[str, int]] = {n: {CHECK: 0, PROBE: 0} for n in names}

    def kind(self, name: str, rep: int) -> str | None:
        """CHECK, PROBE or None (a timed call) for runner ``name``'s call in rep ``rep``."""
        if name not in self.plan:
            return None
        if rep < self.first_reps:
            return self.plan[name].get(rep)
        if self.rng.random() >= self.rate:
            return None
        kind = CHECK if self.rng.random() < 0.5 else PROBE
        if self.extra[name][kind] >= self.most_extra:
            return None
        self.extra[name][kind] += 1
        return kind


def projected_error(
    c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, projection: torch.Tensor
) -> float:
    """C's relative Frobenius error against A·B (B as the K×N matrix), estimated through a
    Gaussian projection X (N×PROJECTION_COLUMNS, float64): ‖(C − AB)X‖ / ‖ABX‖, which has the
    full error as its expectation, from a few GEMV-sized products instead of an fp32 GEMM; in
    float64, which no TF32 setting of the process touches. Inf when C holds a non-finite
    value (NaN poison left, an overflow)."""
    if not bool(torch.isfinite(c).all()):
        return float("inf")
    ref = a.double() @ (b.double() @ projection)
    out = c.double() @ projection
    return float(torch.linalg.vector_norm(out - ref)) / max(
        float(torch.linalg.vector_norm(ref)), 1e-30
    )


@dataclass(frozen=True)
class CheckRecord:
    """One checked call: ``reason`` is "ok" or why it failed."""

    rep: int
    reason: str
    error: float  # projected relative error of C (inf when C is not finite)
    tolerance: float
    same_at_stream_end: bool  # C when the caller's stream ended == C after a device sync


def classify(*, same_at_stream_end: bool, error: float, tolerance: float) -> Reason:
    """A checked call's verdict: work after the caller's stream ended is a stream escape; then
    C must be finite and within the tolerance (wrong, or a precision drop when close)."""
    if not same_at_stream_end:
        return Reason.STREAM_ESCAPE
    if error != error or error == float("inf"):
        return Reason.UNWRITTEN
    if error <= tolerance:
        return Reason.OK
    return Reason.PRECISION if error < 0.05 else Reason.WRONG


@dataclass(frozen=True)
class ProbeRecord:
    """One host-synchronised call, seconds: ``event`` on the caller's stream; ``stream``, from
    just before the call to the caller's stream's completion; ``tail``, from there to the
    device's idle (device-wide sync); ``host``, the call's own host time."""

    rep: int
    event: float
    stream: float
    tail: float
    host: float

    @property
    def wall(self) -> float:
        return self.stream + self.tail


def _median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    return quantile(ordered, 0.5) if ordered else float("nan")


def stream_slack(reference_tails: Sequence[float]) -> float:
    """How much longer than the baselines' median tail a runner's median tail may be."""
    if len(reference_tails) < 4:
        return float("inf")  # no reference to judge by: no verdict
    ordered = sorted(reference_tails)
    iqr = quantile(ordered, 0.75) - quantile(ordered, 0.25)
    return max(STREAM_SLACK_IQRS * iqr, STREAM_SLACK_FLOOR_S)


def stream_escapes(
    probes: Mapping[str, Sequence[ProbeRecord]], reference: Iterable[str]
) -> dict[str, str]:
    """{runner: message} for each runner whose median tail after its caller's stream completed
    exceeds the reference runners' (the baselines') by more than :func:`stream_slack`."""
    reference = set(reference)
    tails = [p.tail for name in reference for p in probes.get(name, ())]
    base, slack = _median(tails), stream_slack(tails)
    escapes = {}
    for name, records in probes.items():
        if name in reference or not records:
            continue
        tail = _median(p.tail for p in records)
        if tail - base > slack:
            event = _median(p.event for p in records)
            escapes[name] = (
                f"the device went on {tail * 1e6:.1f} us after the caller's stream completed "
                f"(baselines: {base * 1e6:.1f} us, slack {slack * 1e6:.1f} us; event time "
                f"{event * 1e6:.1f} us)"
            )
    return escapes


@dataclass
class TimedLog:
    """What the checks saw in one protocol, and what they cost (host seconds of the sampled
    calls, which include their GPU work; the inputs' refresh and C's poison, GPU seconds per
    call, measured with events on a few calls)."""

    checks: dict[str, list[CheckRecord]] = field(default_factory=dict)
    probes: dict[str, list[ProbeRecord]] = field(default_factory=dict)
    sampled_s: float = 0.0
    prepare_s_per_call: float = 0.0
    prepared_calls: int = 0
    kinds: dict[str, str] = field(default_factory=dict)  # runner name → Runner.kind

    def add_check(self, name: str, record: CheckRecord) -> None:
        self.checks.setdefault(name, []).append(record)

    def add_probe(self, name: str, record: ProbeRecord) -> None:
        self.probes.setdefault(name, []).append(record)

    def reference(self) -> list[str]:
        """The baselines (NVIDIA's libraries, the torch-tuned ones): the stream tails' reference,
        never rejected."""
        return [
            n
            for n, kind in self.kinds.items()
            if kind != CANDIDATE_KIND and kind not in UNCHECKED_KINDS
        ]

    def failures(self) -> dict[str, dict[str, str]]:
        """{runner: {"reason", "message"}} of every runner, baselines included: a stream escape
        (work outside the caller's stream also makes the checked calls' values wrong: the
        escape is the cause), else its first failed check."""
        out: dict[str, dict[str, str]] = {
            name: {"reason": Reason.STREAM_ESCAPE, "message": message}
            for name, message in stream_escapes(self.probes, self.reference()).items()
        }
        for name, records in self.checks.items():
            failed = [r for r in records if r.reason != Reason.OK]
            if failed and name not in out:
                first = failed[0]
                out[name] = {
                    "reason": first.reason,
                    "message": (
                        f"{len(failed)} of {len(records)} checked timed calls failed; rep "
                        f"{first.rep}: {first.reason}, error {first.error:.3g} "
                        f"(tolerance {first.tolerance:.3g})"
                    ),
                }
        return out

    def rejections(self) -> dict[str, dict[str, str]]:
        """:meth:`failures` of the runners that are not baselines: a baseline is the library
        the candidates are measured against, never rejected (its failures are reported, under
        ``baseline_failures``: torch.matmul may reduce in fp16 where PyTorch allows it)."""
        reference = set(self.reference())
        return {n: f for n, f in self.failures().items() if n not in reference}

    def cost(self) -> dict[str, Any]:
        """Seconds the checks added to the protocol, in all and per runner."""
        prepare = self.prepare_s_per_call * self.prepared_calls
        runners = max(1, len(self.kinds))
        return {
            "sampled_calls_s": round(self.sampled_s, 6),
            "prepare_s_per_call": self.prepare_s_per_call,
            "prepare_s": round(prepare, 6),
            "per_runner_s": round((self.sampled_s + prepare) / runners, 6),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": {n: len(r) for n, r in self.checks.items()},
            "probed": {n: len(r) for n, r in self.probes.items()},
            "check_errors": {n: max(c.error for c in r) for n, r in self.checks.items() if r},
            "tolerance": next((r[0].tolerance for r in self.checks.values() if r), None),
            "stream_tail_s": {
                n: statistics.median(p.tail for p in r) for n, r in self.probes.items() if r
            },
            "cost": self.cost(),
            "baseline_failures": {
                n: f for n, f in self.failures().items() if n in set(self.reference())
            },
            "records": {
                "checks": {n: [asdict(c) for c in r] for n, r in self.checks.items()},
                "probes": {n: [asdict(p) for p in r] for n, r in self.probes.items()},
            },
        }
