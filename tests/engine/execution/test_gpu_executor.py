"""LocalGpuExecutor's step: the verification children (one per candidate, all started
at once) run while the parent sets up its measurement; nothing is timed before every verdict is
in; the step books where its time went. Test doubles stand in for the children and the GPU."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine.execution.executor import CompiledCandidate, LocalGpuExecutor
from engine.isolation.forkserver import ForkServer
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem
from engine.timing import measure as measure_module
from engine.timing.phases import Phases
from engine.verify import verifier as verify_module
from engine.verify.verifier import Verifications, VerifyResult

PROBLEM = Problem(1024, 1024, 1024, Layout.NN)


def batch_of(*names: str) -> list[CompiledCandidate]:
    return [CompiledCandidate(name, None, Path(f"/x/{name}.so")) for name in names]


def record_for(names) -> dict:
    base = {"cublaslt_autotune": {"seconds": 1.2e-4, "layout": "nn"}}  # under the audit rule
    return {
        "protocols": {
            "device": {
                "seconds": dict.fromkeys(names, 0.0001),
                "best_baselines": base,
                "rejected_while_timed": [],
                "impossible": [],
            }
        }
    }


def use_fakes(monkeypatch, verify, session) -> None:
    """``verify`` stands in for each verification child, ``session`` for engine.timing.measure's."""
    monkeypatch.setattr(verify_module, "verify", verify)
    monkeypatch.setattr(measure_module, "Session", session)
    monkeypatch.setattr(measure_module, "load_shim", lambda config: object())


class Timeline:
    """What happened, in order, from the verification threads and the parent."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.set_up = threading.Event()

    def note(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


@pytest.fixture
def timeline(monkeypatch) -> Timeline:
    t = Timeline()

    def fake_verify(library, problem, **_kwargs):
        t.note(f"verify {Path(library).stem} started")
        # the parent's set-up runs while the children verify: it gets here first
        assert t.set_up.wait(5), "the set-up did not run while the candidates verified"
        t.note(f"verify {Path(library).stem} done")
        if "bad" in str(library):
            return VerifyResult(False, "wrong", "mismatch at (0, 0)")
        return VerifyResult(True, "ok", "all checks passed")

    class FakeSession:
        def __init__(self, problem, *, config=None, shim=None, phases=None, **_):
            t.note("set-up")
            t.set_up.set()
            self.phases = phases

        def run(self, candidates, **kwargs):
            t.note(f"timed {sorted(candidates)}")
            with self.phases("timing"):
                pass
            return record_for(candidates)

    use_fakes(monkeypatch, fake_verify, FakeSession)
    return t


def test_the_set_up_overlaps_verification_and_timing_waits_for_every_verdict(timeline):
    phases = Phases()
    executor = LocalGpuExecutor(arch="sm_90", verify_jobs=8)
    outcomes = executor.execute(PROBLEM, batch_of("a", "bad", "c"), phases=phases)
    events = timeline.events
    assert events.index("set-up") < min(i for i, e in enumerate(events) if e.endswith("done"))
    assert events[-1] == "timed ['a', 'c']"  # the rejected one is never timed
    assert [o.status for o in outcomes] == [
        CandidateStatus.OK,
        CandidateStatus.REJECTED,
        CandidateStatus.OK,
    ]
    assert {"setup", "verification", "timing"} <= set(phases.seconds)
    assert phases.info["verification_children"] == 3
    assert phases.info["verification_wall_s"] >= 0


def test_verifications_started_by_the_caller_are_the_ones_collected(timeline):
    batch = batch_of("a", "b")
    started = Verifications([c.library for c in batch], PROBLEM, jobs=2)
    outcomes = LocalGpuExecutor(arch="sm_90").execute(PROBLEM, batch, verifications=started)
    assert [o.status for o in outcomes] == [CandidateStatus.OK, CandidateStatus.OK]
    assert sum(e.endswith("started") for e in timeline.events) == 2  # not verified twice
    other = Verifications([Path("/x/other.so")], PROBLEM)
    with pytest.raises(ValueError, match="not this batch"):
        LocalGpuExecutor(arch="sm_90").execute(PROBLEM, batch, verifications=other)


def test_every_candidate_gets_its_own_child_and_all_start_at_once(monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def fake_verify(library, problem, **_kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 4:
                release.set()
        release.wait(5)
        with lock:
            running[0] -= 1
        return VerifyResult(True, "ok", "")

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    verifications = Verifications([Path(f"/x/{i}.so") for i in range(4)], PROBLEM, jobs=4)
    assert [v.ok for v in verifications.results()] == [True] * 4
    assert peak[0] == 4
    assert verifications.seconds is not None
    assert verifications.seconds < 5


def test_a_set_up_failure_matters_only_when_a_candidate_passed(monkeypatch):
    def broken(*_args, **_kwargs):
        raise measure_module.MeasureSetupError("no cuBLAS here")

    monkeypatch.setattr(measure_module, "Session", broken)
    monkeypatch.setattr(measure_module, "load_shim", lambda config: object())
    monkeypatch.setattr(
        verify_module,
        "verify",
        lambda library, problem, **_: VerifyResult("good" in str(library), "x", ""),
    )
    rejected = LocalGpuExecutor(arch="sm_90").execute(PROBLEM, batch_of("bad1", "bad2"))
    assert [o.status for o in rejected] == [CandidateStatus.REJECTED] * 2
    with pytest.raises(measure_module.MeasureSetupError, match="no cuBLAS"):
        LocalGpuExecutor(arch="sm_90").execute(PROBLEM, batch_of("bad", "good"))


def test_one_fork_server_serves_every_batch_the_executor_verifies(timeline, monkeypatch):
    servers = []
    real_verifications = verify_module.Verifications

    def spy(libraries, problem, **kwargs):
        servers.append(kwargs.get("fork_server"))
        return real_verifications(libraries, problem, **kwargs)

    monkeypatch.setattr(verify_module, "Verifications", spy)
    executor = LocalGpuExecutor(arch="sm_90", verify_jobs=2)
    executor.execute(PROBLEM, batch_of("a", "b"))
    executor.execute(PROBLEM, batch_of("c"))
    assert len(servers) == 2
    assert isinstance(servers[0], ForkServer)
    assert servers[1] is servers[0]
    monkeypatch.setenv("ENGINE_VERIFY_FORK_SERVER", "off")
    executor.execute(PROBLEM, batch_of("d"))
    assert servers[2] is False  # fresh children


def test_no_more_verifiers_run_at_once_than_the_gpus_memory_holds_for_the_shape():
    h200 = 141 << 30
    assert verify_module.jobs_for_memory(Problem(4096, 4096, 4096), 16, h200) == 16
    big = Problem(16384, 16384, 8192)
    assert 1 < verify_module.jobs_for_memory(big, 16, h200) <= 6
    assert verify_module.jobs_for_memory(big, 16, None) == 16  # no GPU known: no cap
    assert verify_module.jobs_for_memory(big, 16, 1 << 30) == 1  # never none at all


def test_a_verifier_out_of_gpu_memory_among_others_runs_again_alone(monkeypatch):
    calls, lock = [], threading.Lock()

    def fake_verify(library, problem, **_kwargs):
        name = Path(library).stem
        with lock:
            first = name not in calls
            calls.append(name)
        if name == "big" and first:
            return VerifyResult(False, "gpu_memory", "CUDA out of memory")
        return VerifyResult(True, "ok", "")

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    libraries = [Path(f"/x/{n}.so") for n in ("a", "big", "c")]
    verifications = Verifications(libraries, PROBLEM, jobs=3, gpu_bytes=141 << 30)
    verdicts = verifications.results()
    assert [v.reason for v in verdicts] == ["ok", "ok", "ok"]
    assert verifications.retried_alone == 1
    assert calls[-1] == "big"  # after every other verifier had finished


def test_a_verifier_out_of_gpu_memory_alone_is_rejected(monkeypatch):
    monkeypatch.setattr(
        verify_module, "verify", lambda *a, **k: VerifyResult(False, "gpu_memory", "oom")
    )
    verifications = Verifications([Path("/x/a.so")], PROBLEM, jobs=4, gpu_bytes=141 << 30)
    assert [v.reason for v in verifications.results()] == ["gpu_memory"]
    assert verifications.retried_alone == 0


def heating_fakes(monkeypatch, events: list[str]) -> threading.Event:
    """Verifiers that give their verdicts once the returned event is set (by the parent's third
    round of heat-up, or by the test), and a session that notes its heat-up and its timing."""
    heated = threading.Event()

    def fake_verify(library, problem, **_kwargs):
        assert heated.wait(5), "nothing let the verifiers finish"
        events.append(f"verdict {Path(library).stem}")
        return VerifyResult(True, "ok", "")

    class FakeSession:
        def __init__(self, problem, *, phases=None, **_):
            self.phases = phases

        def heat_while(self, busy):
            rounds = 0
            while busy():
                rounds += 1
                if rounds == 3:
                    heated.set()
                time.sleep(0.005)
            events.append(f"heated {rounds} rounds")
            return 0.25

        def keep_load(self):
            events.append("kept the load")

        def run(self, candidates, **_kwargs):
            events.append("timed")
            return record_for(candidates)

    use_fakes(monkeypatch, fake_verify, FakeSession)
    return heated


def test_with_heat_while_verifying_the_baselines_heat_until_the_last_verdict(monkeypatch):
    events: list[str] = []
    heating_fakes(monkeypatch, events)
    monkeypatch.setenv("ENGINE_HEAT_WHILE_VERIFYING", "on")
    phases = Phases()
    executor = LocalGpuExecutor(arch="sm_90", verify_jobs=2)
    outcomes = executor.execute(PROBLEM, batch_of("a", "b"), phases=phases)
    assert [o.status for o in outcomes] == [CandidateStatus.OK, CandidateStatus.OK]
    assert sorted(events[:2]) == ["verdict a", "verdict b"]  # both came while it heated
    assert events[2].startswith("heated")
    assert int(events[2].split()[1]) >= 3
    assert events[3:] == ["kept the load", "timed"]  # past the next batch's warm verifiers
    assert phases.info["heat_while_verifying_ran_s"] == 0.25
    assert "heat_while_verifying" in phases.seconds


def test_without_heat_while_verifying_the_verdicts_are_awaited_idle(monkeypatch):
    events: list[str] = []
    heating_fakes(monkeypatch, events).set()  # nobody heats: the verifiers need not wait
    monkeypatch.delenv("ENGINE_HEAT_WHILE_VERIFYING", raising=False)
    LocalGpuExecutor(arch="sm_90", verify_jobs=2).execute(PROBLEM, batch_of("a"))
    assert events == ["verdict a", "timed"]


def test_a_heat_that_fails_costs_the_batch_none_of_its_verdicts(monkeypatch):
    events: list[str] = []
    heated = heating_fakes(monkeypatch, events)

    def broken_heat(self, busy):
        heated.set()
        raise RuntimeError("cublasLtMatmul returned 13")

    monkeypatch.setattr(measure_module.Session, "heat_while", broken_heat)
    monkeypatch.setenv("ENGINE_HEAT_WHILE_VERIFYING", "on")
    phases = Phases()
    outcomes = LocalGpuExecutor(arch="sm_90", verify_jobs=2).execute(
        PROBLEM, batch_of("a", "b"), phases=phases
    )
    assert [o.status for o in outcomes] == [CandidateStatus.OK, CandidateStatus.OK]
    assert events[-1] == "timed"
    assert "cublasLtMatmul returned 13" in phases.info["heat_while_verifying_error"]
