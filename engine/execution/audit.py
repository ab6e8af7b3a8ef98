"""The audit of a suspiciously fast candidate, before its time counts.

A candidate faster than cuBLASLt-autotune by more than AUDIT_OVER_AUTOTUNE, or faster than it
and within AUDIT_NEAR_FLOOR of the physical floor (engine.timing.physics), is more likely a cheat
the checks missed than a better kernel ("if you beat cuDNN by >10 %, think again", VERIFY.md row
15). A time that cuBLASLt-autotune itself does not beat is no such sign: on a compute-bound shape
the honest library runs at 1.1–1.3× the floor, and auditing every candidate near it put a fresh
verifier, three sanitizers and a fresh timing process behind each of them. Before
it can become a shape's best or enter a bundle it is verified again in full with a fresh secret
seed (a new verifier process), run under compute-sanitizer (memcheck, racecheck, initcheck) at
the problems its config accepts (engine.verify.sanitize.sanitize_problems), and re-timed in a
fresh process (engine.execution.final.remeasure: baselines beside it, the timed
checks on). Its time is then the fresh process's; any failure rejects it with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.outcomes import Reason
from engine.problem import Problem
from engine.verify import sanitize, verifier

AUDIT_OVER_AUTOTUNE = 1.3  # speedup over cuBLASLt-autotune that calls for an audit
AUDIT_NEAR_FLOOR = 1.5  # a time under this many times the physical floor calls for one
AUDIT_BASELINE = "cublaslt_autotune"
AUDIT_DEVICE_SECONDS = 5.0  # the fresh process's device-protocol run
AUDIT_SANITIZE_TIMEOUT = 60.0

Verifier = Callable[[Path, Problem], Any]  # → engine.verify.verifier.VerifyResult
# library, its config (None: no validity rule known), the problem → its SanitizeResult
Sanitizer = Callable[[Path, Any, Problem], Any]
Remeasurer = Callable[[Problem, dict[str, Path]], dict[str, Any]]  # → a measure record


def audit_trigger(seconds: float, baselines: Mapping[str, float], floor_seconds: float) -> str:
    """Why a candidate of ``seconds`` must be audited ("" when it need not)."""
    reference = baselines.get(AUDIT_BASELINE)
    if reference and seconds > 0 and reference / seconds > AUDIT_OVER_AUTOTUNE:
        return (
            f"{reference / seconds:.2f}x faster than {AUDIT_BASELINE} "
            f"(audited above {AUDIT_OVER_AUTOTUNE}x)"
        )
    faster = not reference or seconds < reference
    if faster and floor_seconds > 0 and seconds < AUDIT_NEAR_FLOOR * floor_seconds:
        return (
            f"{seconds / floor_seconds:.2f}x the physical floor (audited under {AUDIT_NEAR_FLOOR}x)"
        )
    return ""


@dataclass(frozen=True)
class AuditResult:
    """``ok``: every step passed; ``seconds`` and ``baselines`` are then the fresh process's."""

    ok: bool
    reason: str
    message: str
    trigger: str
    steps: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    baselines: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "trigger": self.trigger,
            "steps": self.steps,
            "seconds": self.seconds,
            "baselines": self.baselines,
        }


def default_verifier(library: Path, problem: Problem) -> Any:
    return verifier.verify(library, problem)  # a new process, a new secret seed


def default_sanitizer(library: Path, config: Any, problem: Problem) -> Any:
    problems = sanitize.sanitize_problems(config, problem)
    return sanitize.sanitize(library, problems, timeout=AUDIT_SANITIZE_TIMEOUT)


def default_remeasurer(problem: Problem, libraries: dict[str, Path]) -> dict[str, Any]:
    # engine.execution.final imports the executor, which imports this module: import at call time
    from engine.execution.final import remeasure

    # cuBLASLt-autotune is what the audit compares with; tuning Inductor and TunableOp as well
    # (the finals' extra baselines) would cost tens of seconds a candidate on a large shape
    return remeasure(
        problem,
        libraries,
        protocols=("device",),
        device_seconds=AUDIT_DEVICE_SECONDS,
        extra_baselines=(),
    )


def audit(
    name: str,
    library: Path,
    problem: Problem,
    trigger: str,
    *,
    config: Any = None,
    verifier: Verifier = default_verifier,
    sanitizer: Sanitizer = default_sanitizer,
    remeasurer: Remeasurer = default_remeasurer,
) -> AuditResult:
    """Verify, sanitize, re-time (in that order, stopping at the first failure). ``config``:
    the candidate's (a family config, or a model-written SourceKernel), which says where it may
    be sanitized; None sanitizes it as a kernel without a validity rule."""
    steps: dict[str, Any] = {}

    def failed(reason: str, message: str) -> AuditResult:
        return AuditResult(False, reason, f"audit ({trigger}): {message}", trigger, steps)

    verdict = verifier(library, problem)
    # the verdict without its per-trial details (an error may be inf: not every JSON store
    # takes it); the reason and message say what failed
    steps["verify"] = {
        k: v for k, v in verdict.to_dict().items() if k in ("ok", "reason", "message", "seconds")
    }
    if not verdict.ok:
        return failed(verdict.reason, f"verified again: {verdict.message}")
    try:
        sanitized = sanitizer(library, config, problem)
    except RuntimeError as exc:  # a sanitizer that raises for its setup
        steps["sanitize"] = {"error": str(exc)}
        return failed("sanitize_setup", f"compute-sanitizer could not run: {exc}")
    steps["sanitize"] = sanitized.to_dict()
    if sanitized.reason in sanitize.SETUP_REASONS:  # no tool, no harness
        return failed("sanitize_setup", f"compute-sanitizer could not run: {sanitized.message}")
    if not sanitized.ok:
        return failed(f"sanitize_{sanitized.reason}", f"compute-sanitizer: {sanitized.message}")
    record = remeasurer(problem, {name: library})
    if "error" in record:
        steps["remeasure"] = {"error": record["error"]}
        return failed("remeasure", f"re-timing in a fresh process failed: {record['error']}")
    summary = record["protocols"]["device"]
    steps["remeasure"] = {
        "seconds": summary["seconds"].get(name),
        "best_baselines": summary["best_baselines"],
        "rejections": summary.get("rejections", {}),
        "timed_checks_cost": summary.get("timed_checks", {}).get("cost"),
    }
    if name in summary.get("rejected_while_timed", ()):
        why = summary.get("rejections", {}).get(name, {})
        reason = why.get("reason", Reason.WRONG)
        return failed(reason, f"re-timed: {why.get('message', 'rejected while timed')}")
    if name in summary.get("impossible", ()):
        return failed("impossible", "re-timed below the physical floor")
    baselines = {b: float(v["seconds"]) for b, v in summary["best_baselines"].items()}
    seconds = float(summary["seconds"][name])
    return AuditResult(True, Reason.OK, "", trigger, steps, seconds, baselines)
