"""engine.execution.audit: which candidates are audited, the audit's steps in order, and what the
executor does with its verdict (test doubles stand in for the verifier, the sanitizer, the
fresh-process re-timing and the GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.execution import audit
from engine.execution.executor import CompiledCandidate, LocalGpuExecutor
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem
from engine.timing import measure as measure_module
from engine.verify import verifier as verify_module
from engine.verify.verifier import VerifyResult

PROBLEM = Problem(1024, 1024, 1024, Layout.NN)
LIBRARY = Path("/x/fast.so")


@dataclass(frozen=True)
class Sanitized:
    ok: bool
    reason: str = "ok"
    message: str = ""

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason}


def remeasured(seconds: float = 9e-5, rejections: dict | None = None) -> dict:
    return {
        "protocols": {
            "device": {
                "seconds": {"fast": seconds},
                "best_baselines": {"cublaslt_autotune": {"seconds": 1e-4, "layout": "nn"}},
                "rejections": rejections or {},
                "rejected_while_timed": sorted(rejections or {}),
                "impossible": [],
            }
        }
    }


def test_a_candidate_much_faster_than_cublaslt_autotune_is_audited():
    why = audit.audit_trigger(50e-6, {"cublaslt_autotune": 100e-6}, 1e-6)
    assert why.startswith("2.00x faster than cublaslt_autotune")


def test_a_candidate_near_the_physical_floor_is_audited():
    assert "the physical floor" in audit.audit_trigger(14e-6, {"cublaslt_autotune": 15e-6}, 10e-6)


def test_a_candidate_near_the_floor_but_slower_than_cublaslt_autotune_is_not_audited():
    assert audit.audit_trigger(13e-6, {"cublaslt_autotune": 12e-6}, 10e-6) == ""
    assert "the physical floor" in audit.audit_trigger(13e-6, {}, 10e-6)


def test_the_audits_fresh_timing_leaves_out_the_torch_tuned_baselines(monkeypatch):
    from engine.execution import final

    seen = {}

    def remeasure(problem, libraries, **kwargs):
        seen.update(kwargs)
        return {"protocols": {}}

    monkeypatch.setattr(final, "remeasure", remeasure)
    audit.default_remeasurer(Problem.parse("4096x4096x4096", "nn"), {"fast": Path("x.so")})
    assert seen["extra_baselines"] == ()
    assert seen["protocols"] == ("device",)


def test_a_candidate_a_little_faster_than_the_library_is_not_audited():
    assert audit.audit_trigger(90e-6, {"cublaslt_autotune": 100e-6}, 10e-6) == ""
    assert audit.audit_trigger(90e-6, {}, 0.0) == ""


def steps_log():
    calls: list[str] = []

    def verifier(library, problem):
        calls.append("verify")
        return VerifyResult(True, "ok", "all checks passed")

    def sanitizer(library, config, problem):
        calls.append(f"sanitize {problem.layout.value}")
        return Sanitized(True)

    def remeasurer(problem, libraries):
        calls.append(f"remeasure {sorted(libraries)}")
        return remeasured()

    return calls, {"verifier": verifier, "sanitizer": sanitizer, "remeasurer": remeasurer}


def test_an_audit_verifies_sanitizes_then_retimes_in_a_fresh_process():
    calls, steps = steps_log()
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert calls == ["verify", "sanitize nn", "remeasure ['fast']"]
    assert (result.ok, result.seconds, result.baselines) == (
        True,
        9e-5,
        {"cublaslt_autotune": 1e-4},
    )


def test_an_audit_stops_at_the_first_failing_step_with_its_reason():
    calls, steps = steps_log()
    steps["verifier"] = lambda library, problem: VerifyResult(False, "precision", "3 ulp")
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert (result.ok, result.reason) == (False, "precision")
    assert calls == []
    calls, steps = steps_log()
    steps["sanitizer"] = lambda library, config, problem: Sanitized(False, "racecheck", "2 hazards")
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert (result.ok, result.reason) == (False, "sanitize_racecheck")
    assert "remeasure ['fast']" not in calls


def test_an_audit_rejects_what_the_fresh_process_rejected_while_timed():
    _, steps = steps_log()
    escape = {"fast": {"reason": "stream_escape", "message": "tail 40 us"}}
    steps["remeasurer"] = lambda problem, libraries: remeasured(rejections=escape)
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert (result.ok, result.reason) == (False, "stream_escape")
    assert "tail 40 us" in result.message


def executor_with(monkeypatch, seconds: float, auditor) -> LocalGpuExecutor:
    class FakeSession:
        def __init__(self, problem, *, phases=None, **_):
            self.phases = phases

        def run(self, candidates, **_):
            base = {"cublaslt_autotune": {"seconds": 1e-4, "layout": "nn"}}
            summary = {
                "seconds": dict.fromkeys(candidates, seconds),
                "best_baselines": base,
                "rejected_while_timed": [],
                "impossible": [],
                "floor_seconds": 2e-6,
            }
            return {"protocols": {"device": summary}}

    monkeypatch.setattr(verify_module, "verify", lambda *a, **k: VerifyResult(True, "ok", ""))
    monkeypatch.setattr(measure_module, "Session", FakeSession)
    monkeypatch.setattr(measure_module, "load_shim", lambda config: object())
    return LocalGpuExecutor(arch="sm_90", auditor=auditor)


def test_the_executor_takes_an_audited_candidates_time_from_its_fresh_process(monkeypatch):
    audited = []

    def auditor(name, library, problem, trigger, config=None):
        audited.append((name, trigger[:5]))
        return audit.AuditResult(True, "ok", "", trigger, {}, 9e-5, {"cublaslt_autotune": 1e-4})

    executor = executor_with(monkeypatch, 5e-5, auditor)
    [outcome] = executor.execute(PROBLEM, [CompiledCandidate("fast", None, LIBRARY)])
    assert audited == [("fast", "2.00x")]
    assert (outcome.status, outcome.seconds) == (CandidateStatus.OK, 9e-5)
    assert outcome.timings["audit"]["ok"] is True


def test_the_executor_rejects_a_candidate_that_fails_its_audit(monkeypatch):
    def auditor(name, library, problem, trigger, config=None):
        return audit.AuditResult(False, "sanitize_memcheck", "audit: 3 errors", trigger)

    executor = executor_with(monkeypatch, 5e-5, auditor)
    [outcome] = executor.execute(PROBLEM, [CompiledCandidate("fast", None, LIBRARY)])
    assert (outcome.status, outcome.reason) == (CandidateStatus.REJECTED, "sanitize_memcheck")


def test_the_executor_leaves_an_unremarkable_candidate_unaudited(monkeypatch):
    def auditor(*_args, **_kwargs):
        pytest.fail("audited a candidate slower than cuBLASLt-autotune")

    executor = executor_with(monkeypatch, 1.1e-4, auditor)
    [outcome] = executor.execute(PROBLEM, [CompiledCandidate("fine", None, LIBRARY)])
    assert (outcome.status, outcome.seconds) == (CandidateStatus.OK, 1.1e-4)


def test_a_candidate_that_cannot_be_sanitized_fails_its_audit():
    _, steps = steps_log()

    def no_tool(library, config, problem):
        raise RuntimeError("compute-sanitizer not found")

    steps["sanitizer"] = no_tool
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert (result.ok, result.reason) == (False, "sanitize_setup")


def test_a_missing_compute_sanitizer_fails_the_audit_as_setup():
    _, steps = steps_log()
    missing = Sanitized(False, "sanitizer_missing", "compute-sanitizer not found")
    steps["sanitizer"] = lambda library, config, problem: missing
    result = audit.audit("fast", LIBRARY, PROBLEM, "2x", **steps)
    assert (result.ok, result.reason) == (False, "sanitize_setup")
    assert "compute-sanitizer not found" in result.message


def test_the_audit_sanitizes_at_the_problems_the_candidates_config_accepts(monkeypatch):
    from engine.codegen import TritonConfig
    from engine.verify import sanitize

    seen = []

    def fake(library, problems, **_):
        seen.append(problems)
        return Sanitized(True)

    monkeypatch.setattr(sanitize, "sanitize", fake)
    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    audit.default_sanitizer(LIBRARY, config, PROBLEM)
    assert seen == [sanitize.sanitize_problems(config, PROBLEM)]
    assert all(p.k % 64 == 0 for p in seen[0])


def test_the_executor_gives_the_audit_the_candidates_config(monkeypatch):
    configs = []

    def auditor(name, library, problem, trigger, config=None):
        configs.append(config)
        return audit.AuditResult(True, "ok", "", trigger, {}, 9e-5, {"cublaslt_autotune": 1e-4})

    from engine.codegen import TritonConfig

    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    executor = executor_with(monkeypatch, 5e-5, auditor)
    executor.execute(PROBLEM, [CompiledCandidate("fast", config, LIBRARY)])
    assert configs == [config]
