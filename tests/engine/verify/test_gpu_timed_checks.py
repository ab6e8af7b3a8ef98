"""The verifier follows the kernel into the timed phase, on the GPU: each cheat of
tests/fixtures/timed/ is caught in the phase where it misbehaves (the verifier for input-keyed
shortcuts and races; the checks inside the timing protocols for kernels that turn after many
calls), and honest kernels pass both. Runs on the H200, skipped without a GPU."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from engine.compilation import static_checks as sc
from engine.compilation.compile import CompileResult
from engine.problem import Problem
from engine.verify import harness_kernels

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = Problem(1024, 1024, 1024)
PROTOCOLS = ("device", "offline")
TIMING = {"heat_seconds": 0.5, "device_seconds": 3.0, "probe_overhead": False}


def by_phase(phase: str) -> list[Path]:
    return [p for p in harness_kernels.timed_paths() if harness_kernels.expected_phase(p) == phase]


@cache
def built(path: Path) -> CompileResult:
    """Built as a candidate is (the GPU's SASS, shared CUDA runtime), past both static gates."""
    source = path.read_text()
    assert sc.check_candidate(source).ok
    result = harness_kernels.build_one(path, SHAPE.layout, extra_flags=sc.candidate_flags())
    assert result.ok, result.log[-4000:]
    assert sc.check_candidate(source, result.library).ok
    return result


@cache
def timed_record(timed_checks: bool = True) -> dict:
    """One measurement of every timed-phase cheat beside the reference kernel they wrap."""
    from engine.timing.measure import measure

    libraries = {p.stem: built(p).library for p in by_phase("timed")}
    libraries["reference"] = built(harness_kernels.REFERENCE).library
    return measure(
        SHAPE, candidates=libraries, protocols=PROTOCOLS, timed_checks=timed_checks, **TIMING
    )


@pytest.mark.parametrize("path", by_phase("verify"), ids=lambda p: p.stem)
def test_the_verifier_rejects_input_keyed_shortcuts_and_races(path, verifier_sandboxes):
    from engine.verify.verifier import verify

    result = verify(built(path).library, SHAPE, timeout=180)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.reason == harness_kernels.expected_reason(path), (result.message, result.checks)


@pytest.mark.parametrize("path", by_phase("timed"), ids=lambda p: p.stem)
def test_a_cheat_that_turns_after_many_calls_passes_the_verifier(path, verifier_sandboxes):
    """Its misbehaviour is past the verifier's calls: the timed phase must catch it."""
    from engine.verify.verifier import verify

    result = verify(built(path).library, SHAPE, timeout=180)
    assert result.ok, (result.reason, result.message)
    assert result.deterministic is True


@pytest.mark.parametrize(
    "path",
    [p for p in by_phase("timed") if harness_kernels.expected_reason(p) != harness_kernels.NO_GAIN],
    ids=lambda p: p.stem,
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_timed_checks_reject_each_late_cheat_with_its_reason(path, protocol):
    summary = timed_record()["protocols"][protocol]
    rejection = summary["rejections"].get(path.stem)
    assert rejection is not None, summary["timed_checks"]
    assert rejection["reason"] == harness_kernels.expected_reason(path), rejection["message"]
    assert path.stem not in summary["speedups"]


def test_fresh_inputs_and_a_poisoned_c_take_the_fingerprint_skip_away():
    """Without the checks (two operand sets alternating, C keeping its answer) the cheat skips
    its work and looks several times faster than the reference kernel it wraps; with them it
    does the work: no rejection, and no gain."""
    name = "fingerprint_skip"
    honest = timed_record()["protocols"]["device"]["seconds"]
    assert name not in timed_record()["protocols"]["device"]["rejections"]
    assert honest[name] >= 0.9 * honest["reference"], honest
    legacy = timed_record(False)["protocols"]["device"]["seconds"]
    assert legacy[name] < 0.5 * legacy["reference"], legacy


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_reference_kernel_and_the_baselines_pass_the_timed_checks(protocol):
    summary = timed_record()["protocols"][protocol]
    checks = summary["timed_checks"]
    assert "reference" not in summary["rejections"], summary["rejections"].get("reference")
    assert checks["checked"]["reference"] >= 3
    assert checks["probed"]["reference"] >= 6
    failed = {n: f for n, f in checks["baseline_failures"].items() if not n.startswith("torch")}
    assert failed == {}
    assert checks["cost"]["per_runner_s"] > 0


def test_cublas_wrapped_and_the_reference_pass_the_timed_checks_at_an_odd_shape():
    from engine.timing.measure import measure

    problem = Problem(1000, 264, 520)
    libraries = {
        "reference": harness_kernels.build_one(harness_kernels.REFERENCE, problem.layout).library,
        "cublas_wrapped": harness_kernels.build_one(
            harness_kernels.GOOD_KERNELS / "cublas_wrapped.cu", problem.layout
        ).library,
    }
    record = measure(problem, candidates=libraries, protocols=("device", "offline", "graph"))
    for protocol, summary in record["protocols"].items():
        assert summary["rejections"] == {}, (protocol, summary["rejections"])


def test_an_audit_passes_the_reference_and_retimes_it_in_a_fresh_process():
    from engine.execution.audit import audit

    library = built(harness_kernels.REFERENCE).library
    result = audit("reference", library, SHAPE, "asked by the test")
    assert result.ok, (result.reason, result.message)
    assert set(result.steps) == {"verify", "sanitize", "remeasure"}
    assert result.seconds
    assert result.baselines["cublaslt_autotune"] > 0


def test_an_audit_rejects_a_late_cheat_in_its_fresh_process():
    from engine.execution.audit import audit

    path = harness_kernels.TIMED / "precision_drop_after_n.cu"
    result = audit(path.stem, built(path).library, SHAPE, "asked by the test")
    assert (result.ok, result.reason) == (False, "precision"), result.message
