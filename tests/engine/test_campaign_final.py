"""The GPU executor's parallel verification and the end-of-campaign top-k selection (the GPU
path itself runs in bench/gpu_run.sh's campaign stage)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine import verify as verify_module
from engine.campaign.executor import STATUS_OK, STATUS_REJECTED, CompiledCandidate, LocalGpuExecutor
from engine.campaign.final import config_of, final_summary, top_records
from engine.campaign.space import SearchSpace
from engine.campaign.storage import CandidateRecord
from engine.problem import Layout, Problem
from engine.verify import VerifyResult

PROBLEM = Problem(1024, 1024, 1024, Layout.NN)


def record(name: str, seconds: float | None, status: str = STATUS_OK, **kw) -> CandidateRecord:
    space = SearchSpace.library(PROBLEM, families=("sm90",))
    config = space.configs[hash(name) % len(space.configs)]
    return CandidateRecord(
        name=name,
        family=config.FAMILY,
        knobs=config.knobs(),
        proposer="rl",
        status=status,
        reward=0.0,
        seconds=seconds,
        baselines={"cublaslt_autotune": 10.0},
        **kw,
    )


def test_top_records_ranks_verified_family_candidates_by_speed():
    records = [
        record("slow", 20.0),
        record("fast", 8.0),
        record("failed", None, STATUS_REJECTED),
        record("llm", 1.0, source="// model-written"),
        record("middle", 12.0),
    ]
    assert [r.name for r in top_records(records, "cublaslt_autotune", 2)] == ["fast", "middle"]
    assert config_of(records[1]).knobs() == dict(records[1].knobs)


def test_final_summary_keeps_the_error_of_a_failed_remeasurement():
    assert final_summary({"error": "exited 1"}) == {"error": "exited 1"}


def test_the_gpu_executor_verifies_a_batch_in_parallel_and_records_each_rejection(monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()

    def fake_verify(library, problem, **_kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if "bad" in str(library):
            return VerifyResult(False, "wrong_values", "mismatch at (0, 0)")
        return VerifyResult(False, "unwritten", "C left NaN")

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    batch = [
        CompiledCandidate(name=f"c{i}", config=None, library=Path(f"/x/{'bad' if i % 2 else 'ok'}"))
        for i in range(6)
    ]
    outcomes = LocalGpuExecutor(arch="sm_90", verify_jobs=3).execute(PROBLEM, batch)
    assert peak[0] == 3
    assert [o.reason for o in outcomes] == ["unwritten", "wrong_values"] * 3
    assert all(o.status == STATUS_REJECTED for o in outcomes)


def test_a_top_kernel_that_fails_the_sanitizer_cannot_be_the_final_best(monkeypatch, tmp_path):
    from engine.campaign import final
    from engine.campaign.loop import ProblemResult
    from engine.compile import CompileResult

    records = [record("fast", 8.0), record("middle", 9.0), record("slow", 30.0)]
    result = ProblemResult(PROBLEM, records, stopped="budget")

    def compile_(configs):
        return [
            CompileResult(True, tmp_path / f"{i}.so", "h", ("sm_90a",), "", "", 1.0, True)
            for i, _ in enumerate(configs)
        ]

    class Verdict:
        def __init__(self, ok):
            self.ok = ok

        def to_dict(self):
            return {"ok": self.ok}

    measured = {}

    def fake_remeasure(problem, libraries, **_kwargs):
        measured[problem.key] = sorted(libraries)
        return {"error": "not on a GPU"}

    monkeypatch.setattr(final, "remeasure", fake_remeasure)
    finals = final.final_measurements(
        [result],
        baseline="cublaslt_autotune",
        top=2,
        compile=compile_,
        sanitizer=lambda library: Verdict(library.name != "0.so"),  # "fast" fails
    )
    assert measured[PROBLEM.key] == ["middle"]
    assert finals[PROBLEM.key]["sanitize"] == {"fast": {"ok": False}, "middle": {"ok": True}}
