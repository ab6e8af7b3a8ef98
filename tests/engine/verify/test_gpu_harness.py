"""The harness on a real GPU: every known-bad kernel is rejected with its reason, honest kernels
(the reference, cuBLAS wrapped in the ABI) pass, each verifier child in the candidate sandbox
(engine.isolation.sandbox), and the protocols time baselines sanely."""

from __future__ import annotations

import pytest

from engine.problem import Layout, Problem
from engine.verify import harness_kernels
from engine.verify.verifier import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = Problem(1024, 1024, 1024)
ODD_SHAPE = Problem(1000, 264, 520, Layout.TN)  # not a multiple of any tile


@pytest.mark.parametrize("path", harness_kernels.bad_kernel_paths(), ids=lambda p: p.stem)
def test_it_rejects_each_known_bad_kernel_with_its_reason(path, verifier_sandboxes):
    built = harness_kernels.build_one(path, SHAPE.layout)
    assert built.ok, built.log
    timeout = 20 if harness_kernels.expected_reason(path) == "timeout" else 120
    result = verify(built.library, SHAPE, timeout=timeout)
    verifier_sandboxes.assert_all_sandboxed()
    assert not result.ok
    assert result.reason == harness_kernels.expected_reason(path), result.message


@pytest.mark.parametrize("problem", [SHAPE, ODD_SHAPE, Problem(64, 64, 64, Layout.TN)], ids=str)
def test_it_accepts_the_reference_kernel(problem, verifier_sandboxes):
    built = harness_kernels.build_one(harness_kernels.REFERENCE, problem.layout)
    assert built.ok, built.log
    result = verify(built.library, problem)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.ok, (result.reason, result.message, result.stderr_tail)
    assert set(result.startup_s) == {"start", "cuda_init"}  # the child's start-up, timed
    assert {"session", "checks"} <= set(result.phases_s)  # then its set-up and its trials
    parts = ("session_library", "session_buffers", "session_warm_up")
    assert sum(result.phases_s[p] for p in parts) <= result.phases_s["session"] + 0.01
    assert all("seconds" in check["detail"] for check in result.checks)
    assert result.busy_stream == "gate"  # held by the gate, none opened by its watchdog


@pytest.mark.parametrize("problem", [SHAPE, ODD_SHAPE], ids=str)
def test_it_accepts_cublas_wrapped_in_the_abi(problem, verifier_sandboxes):
    wrapped = harness_kernels.GOOD_KERNELS / "cublas_wrapped.cu"
    built = harness_kernels.build_one(wrapped, problem.layout)
    assert built.ok, built.log
    result = verify(built.library, problem)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.ok, (result.reason, result.message, result.stderr_tail)


def test_measure_times_every_baseline_and_the_candidate_above_the_floor():
    from engine.timing.measure import measure

    built = harness_kernels.build_one(harness_kernels.REFERENCE, SHAPE.layout)
    record = measure(SHAPE, candidates={"reference": built.library}, protocols=("device", "graph"))
    device = record["protocols"]["device"]
    assert set(device["best_baselines"]) == {
        "torch",
        "cublas",
        "cublaslt_heuristic",
        "cublaslt_autotune",
    }
    assert device["impossible"] == []
    assert all(t > 0 for t in device["seconds"].values())
    assert all(record["protocols"][p]["wall_s"] > 0 for p in ("device", "graph"))
    # the simple reference kernel is far slower than cuBLAS
    assert device["speedups"]["reference"]["cublas"] < 1.0


def test_the_record_names_the_kernels_cublaslt_ran():
    """What cuBLASLt-autotune and the heuristic ran, read from the algorithms' configuration and
    named with the installed cublasLt.h's enumerations."""
    from engine.timing.measure import measure

    record = measure(SHAPE, protocols=("device",), device_seconds=0.2, probe_overhead=False)
    for layout in ("nn", "tn"):
        report = record["autotune"][f"cublaslt_autotune_{layout}"]
        kernel, heuristic = report["kernel"], report["heuristic_kernel"]
        assert kernel["algo_id"] >= 0, kernel
        assert kernel["raw"]["tile_id"] >= 0, kernel
        assert isinstance(kernel["tile_m"], int), kernel  # the header named its tile
        assert isinstance(kernel["tile_n"], int), kernel
        assert kernel["splitk"] >= 1
        assert kernel["label"].startswith(f"algo{kernel['algo_id']} "), kernel
        assert heuristic is not None


def test_heating_while_verifiers_work_leaves_the_timing_no_heat_up_to_run(monkeypatch):
    import time

    from engine.gpu.runtime import KernelLibrary
    from engine.timing import measure

    class SlowToLoad(KernelLibrary):  # 4 × 0.1 s: longer than a pause that ends a load
        def __init__(self, path):
            time.sleep(0.1)
            super().__init__(path)

    monkeypatch.setattr(measure, "KernelLibrary", SlowToLoad)
    built = harness_kernels.build_one(harness_kernels.REFERENCE, SHAPE.layout)
    assert built.ok, built.log
    session = measure.Session(SHAPE)
    session.prepare_baselines()
    until = time.monotonic() + 1.5
    ran = session.heat_while(lambda: time.monotonic() < until)
    assert 1.4 <= ran < 3.0
    candidates = {f"reference{i}": built.library for i in range(4)}
    timing = {"heat_seconds": 1.0, "device_seconds": 1.0, "probe_overhead": False}
    record = session.run(candidates, protocols=("device",), **timing)
    assert session.phases.info["heat_up_ran_s"] == 0.0
    assert record["protocols"]["device"]["impossible"] == []


def test_an_honest_kernel_verified_many_times_side_by_side_always_passes(verifier_sandboxes):
    """Four verifiers at once slow each other's streams down: with the busy stream held by the
    gate, a copy the harness made on the default stream once raced the next trial's snapshot
    of A and B and rejected honest kernels (`input_modified`, 2 of 128 on the H200)."""
    from engine.verify.verifier import Verifications

    problem = Problem(4096, 1024, 4096)
    built = harness_kernels.build_one(harness_kernels.REFERENCE, problem.layout)
    assert built.ok, built.log
    verdicts = Verifications([built.library] * 24, problem, jobs=4).results()
    assert [v.reason for v in verdicts] == ["ok"] * 24
