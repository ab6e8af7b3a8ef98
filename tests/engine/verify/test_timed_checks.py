"""engine.verify.timed_checks: the sampling plan, the verdict of a checked call, the stream-escape
rule on host-synchronised probes and what a protocol's log rejects, with made-up records (no
GPU)."""

from __future__ import annotations

import random

import pytest
import torch

from engine.problem import Problem
from engine.timing.protocols import L2_FLUSH_BYTES
from engine.verify import numerics
from engine.verify import timed_checks as tc

BASELINES = {
    "torch_nn": "torch",
    "cublas_nn": "cublas",
    "cublaslt_heuristic_nn": "cublaslt_heuristic",
    "cublaslt_autotune_nn": "cublaslt_autotune",
}


def probe(tail: float, event: float = 50e-6, rep: int = 0) -> tc.ProbeRecord:
    return tc.ProbeRecord(rep=rep, event=event, stream=event + 10e-6, tail=tail, host=5e-6)


def baseline_probes(tails=(3.0e-6, 3.2e-6, 2.9e-6, 3.1e-6, 3.0e-6, 3.3e-6)):
    return {name: [probe(t) for t in tails] for name in BASELINES}


def test_small_shapes_rotate_up_to_eight_operand_sets_and_large_ones_two():
    assert tc.operand_set_count(Problem(256, 256, 256), L2_FLUSH_BYTES) == tc.MAX_OPERAND_SETS
    assert tc.operand_set_count(Problem(8192, 8192, 8192), L2_FLUSH_BYTES) == 2
    mid = Problem(2048, 2048, 2048)  # 40 MiB a set
    assert tc.operand_set_count(mid, L2_FLUSH_BYTES) == L2_FLUSH_BYTES // tc.operand_set_bytes(mid)


def test_the_plan_gives_each_runner_distinct_checked_and_probed_reps():
    plan = tc.plan_samples(["x", "y"], 20, checks=3, probes=6, rng=random.Random(1))
    for reps in plan.values():
        assert len(reps) == 9
        assert sorted(reps.values()).count(tc.CHECK) == 3
        assert all(0 <= rep < 20 for rep in reps)
    assert plan["x"] != plan["y"]


def test_a_short_protocol_samples_at_most_half_its_reps_so_each_runner_keeps_timed_calls():
    plan = tc.plan_samples(["x"], 5, checks=3, probes=6, rng=random.Random(1))
    assert len(plan["x"]) == 2
    assert tc.CHECK in plan["x"].values()


def test_the_sampler_keeps_checking_after_the_first_reps_so_late_turns_are_seen():
    sampler = tc.Sampler(["x"], random.Random(3), first_reps=20, rate=0.05, most_extra=6)
    late = [rep for rep in range(20, 5000) if sampler.kind("x", rep) == tc.CHECK]
    assert len(late) == 6  # capped, and spread over the run
    assert late[-1] > 100


def test_the_sampler_never_samples_runners_it_was_not_given():
    sampler = tc.Sampler(["x"], random.Random(3), first_reps=20)
    assert all(sampler.kind("algo3", rep) is None for rep in range(200))


@pytest.mark.parametrize(
    ("same", "error", "expected"),
    [
        (True, 1e-4, "ok"),
        (False, 1e-4, "stream_escape"),
        (True, float("inf"), "unwritten"),
        (True, float("nan"), "unwritten"),
        (True, 1.2e-3, "precision"),
        (True, 1.0, "wrong"),
    ],
)
def test_a_checked_call_is_classified_by_stream_then_finiteness_then_error(same, error, expected):
    assert tc.classify(same_at_stream_end=same, error=error, tolerance=4e-4) == expected


def test_an_honest_candidate_with_a_baseline_like_tail_is_not_an_escape():
    probes = {**baseline_probes(), "mine": [probe(t) for t in (3.1e-6, 3.4e-6, 2.8e-6, 3.0e-6)]}
    assert tc.stream_escapes(probes, BASELINES) == {}


def test_every_runner_but_a_candidate_is_a_baseline_never_rejected():
    log = tc.TimedLog(kinds={"tunableop_nn": "tunableop", "algo3": "cublaslt_candidate"})
    log.kinds["mine"] = "candidate"
    assert log.reference() == ["tunableop_nn"]
    log.add_check("tunableop_nn", check("wrong", 1, 1.0))
    assert log.rejections() == {}


def test_work_that_outlives_the_callers_stream_is_a_stream_escape():
    escaped = [probe(t, event=2e-6) for t in (40e-6, 41e-6, 39e-6, 42e-6)]
    escapes = tc.stream_escapes({**baseline_probes(), "mine": escaped}, BASELINES)
    assert list(escapes) == ["mine"]
    assert "after the caller's stream completed" in escapes["mine"]


def test_the_slack_grows_with_the_baselines_own_noise():
    noisy = baseline_probes(tails=(3e-6, 9e-6, 4e-6, 12e-6, 5e-6, 10e-6))
    jittery = [probe(t) for t in (11e-6, 12e-6, 10e-6, 13e-6)]
    assert tc.stream_escapes({**noisy, "mine": jittery}, BASELINES) == {}
    quiet = baseline_probes()
    assert "mine" in tc.stream_escapes({**quiet, "mine": jittery}, BASELINES)


def test_without_baseline_probes_there_is_no_stream_verdict():
    assert tc.stream_slack([1e-6, 2e-6]) == float("inf")
    assert tc.stream_escapes({"mine": [probe(1e-3)]}, BASELINES) == {}


def log_with(checks=None, probes=None) -> tc.TimedLog:
    log = tc.TimedLog(kinds={**BASELINES, "mine": "candidate"})
    for name, records in (checks or {}).items():
        for record in records:
            log.add_check(name, record)
    for name, records in (probes or baseline_probes()).items():
        for record in records:
            log.add_probe(name, record)
    return log


def check(reason: str, rep: int = 5, error: float = 1e-4) -> tc.CheckRecord:
    return tc.CheckRecord(rep, reason, error, 4e-4, reason != "stream_escape")


def test_the_log_rejects_a_runner_by_its_first_failed_check():
    log = log_with(checks={"mine": [check("ok", 1), check("precision", 7, 1.3e-3), check("ok")]})
    rejection = log.rejections()["mine"]
    assert rejection["reason"] == "precision"
    assert "1 of 3 checked timed calls failed; rep 7" in rejection["message"]


def test_the_log_rejects_a_stream_escape_seen_only_by_the_probes():
    probes = {**baseline_probes(), "mine": [probe(50e-6) for _ in range(4)]}
    log = log_with(checks={"mine": [check("ok")]}, probes=probes)
    assert log.rejections()["mine"]["reason"] == "stream_escape"


def test_the_log_passes_honest_runners_and_reports_its_cost():
    log = log_with(checks={"mine": [check("ok")], "cublas_nn": [check("ok")]})
    log.sampled_s, log.prepare_s_per_call, log.prepared_calls = 0.05, 20e-6, 1000
    assert log.rejections() == {}
    cost = log.to_dict()["cost"]
    assert cost["prepare_s"] == pytest.approx(0.02)
    assert cost["per_runner_s"] == pytest.approx(0.07 / 5)


def test_a_baseline_that_fails_a_check_is_reported_not_rejected():
    log = log_with(checks={"torch_nn": [check("precision", 3, 1e-3)], "mine": [check("ok")]})
    assert log.rejections() == {}
    assert log.to_dict()["baseline_failures"]["torch_nn"]["reason"] == "precision"


def test_a_stream_escape_names_the_cause_of_the_wrong_values_it_leads_to():
    probes = {**baseline_probes(), "mine": [probe(50e-6) for _ in range(4)]}
    log = log_with(checks={"mine": [check("unwritten", 2, float("inf"))]}, probes=probes)
    assert log.rejections()["mine"]["reason"] == "stream_escape"


def operands(m=512, n=384, k=1024):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).half()
    b = torch.randn(k, n, generator=gen).half()
    x = torch.randn(n, tc.PROJECTION_COLUMNS, generator=gen, dtype=torch.float64)
    return a, b, x


def test_the_projected_error_tracks_the_full_error_of_rounding_and_fp16_accumulation():
    a, b, x = operands()
    exact = a.double() @ b.double()
    for c in (exact.half(), numerics.simulate_fp16_accumulation(a.float(), b.float())):
        full = numerics.relative_frobenius_error(c, exact.float())
        assert tc.projected_error(c, a, b, x) == pytest.approx(full, rel=0.1)


def test_fp16_accumulation_is_over_the_tolerance_calibrated_on_a_correct_rounding():
    a, b, x = operands()
    exact = a.double() @ b.double()
    tolerance = numerics.calibrated_tolerance(tc.projected_error(exact.half(), a, b, x))
    drop = numerics.simulate_fp16_accumulation(a.float(), b.float())
    error = tc.projected_error(drop, a, b, x)
    assert tc.classify(same_at_stream_end=True, error=error, tolerance=tolerance) == "precision"


def test_a_poisoned_c_left_unwritten_has_infinite_error():
    a, b, x = operands(64, 64, 64)
    c = (a.double() @ b.double()).half()
    c[3, 5] = float("nan")
    assert tc.projected_error(c, a, b, x) == float("inf")


def test_every_late_or_input_keyed_cheat_names_its_reason_and_the_phase_that_catches_it():
    from engine.verify import harness_kernels
    from engine.verify.verifier import REASONS

    paths = harness_kernels.timed_paths()
    assert {p.stem for p in paths} >= {
        "fingerprint_skip",
        "stream_escape_after_n",
        "precision_drop_after_n",
        "late_turn",
        "input_trigger",
        "atomic_race",
    }
    for path in paths:
        reason = harness_kernels.expected_reason(path)
        assert reason in REASONS or reason == harness_kernels.NO_GAIN, path.name
        assert harness_kernels.expected_phase(path) in ("verify", "timed"), path.name
