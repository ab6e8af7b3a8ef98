"""engine.verify.verifier, parent side: how a child's exit and verdict file become a VerifyResult,
and that every reason a fixture kernel expects is a known reason."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from engine.isolation import sandbox
from engine.isolation.forkserver import FORKED, ForkServer
from engine.isolation.processes import ProcessResult
from engine.problem import Problem
from engine.verify import harness_kernels
from engine.verify import verifier as verify_module
from engine.verify.verifier import REASONS, VerifyResult, interpret, verify
from tests.engine.process_fakes import environment_reporting_python, killed_for_memory


def process(
    *, returncode: int | None = 0, timed_out: bool = False, stderr: str = "", seconds: float = 1.5
) -> ProcessResult:
    return ProcessResult(
        command="python -m engine.verify.gpu_checks spec.json verdict.json",
        returncode=returncode,
        stdout="",
        stderr=stderr,
        seconds=seconds,
        timed_out=timed_out,
    )


def write_verdict(path, **fields):
    verdict = {"ok": False, "reason": "wrong", "message": "12 elements differ", "checks": []}
    verdict.update(fields)
    path.write_text(json.dumps(verdict))
    return path


def test_it_turns_a_timed_out_child_into_a_timeout(tmp_path):
    result = interpret(
        process(returncode=None, timed_out=True, stderr="still running"),
        tmp_path / "verdict.json",
        20,
    )
    assert not result.ok
    assert result.reason == "timeout"
    assert "20 s" in result.message
    assert result.seconds == 1.5
    assert result.stderr_tail == "still running"


def test_a_timeout_wins_over_a_verdict_left_behind(tmp_path):
    verdict = write_verdict(tmp_path / "verdict.json", ok=True, reason="ok")
    result = interpret(process(returncode=None, timed_out=True), verdict, 20)
    assert (result.ok, result.reason) == (False, "timeout")


def test_it_turns_a_non_zero_exit_without_a_verdict_into_a_crash(tmp_path):
    result = interpret(
        process(returncode=-11, stderr="Segmentation fault"), tmp_path / "verdict.json", 180
    )
    assert not result.ok
    assert result.reason == "crash"
    assert "-11" in result.message
    assert result.stderr_tail == "Segmentation fault"


def test_it_turns_a_clean_exit_without_a_verdict_into_a_crash(tmp_path):
    result = interpret(process(returncode=0), tmp_path / "verdict.json", 180)
    assert (result.ok, result.reason) == (False, "crash")


def test_it_distrusts_a_verdict_from_a_child_that_exited_non_zero(tmp_path):
    verdict = write_verdict(tmp_path / "verdict.json", ok=True, reason="ok")
    result = interpret(process(returncode=1), verdict, 180)
    assert (result.ok, result.reason) == (False, "crash")


def test_it_reads_a_rejecting_verdict_file(tmp_path):
    checks = [{"name": "exact", "ok": False, "detail": {"mismatches": 12}}]
    verdict = write_verdict(tmp_path / "verdict.json", checks=checks, seconds=3.25)
    result = interpret(process(stderr="warning"), verdict, 180)
    assert isinstance(result, VerifyResult)
    assert not result.ok
    assert result.reason == "wrong"
    assert result.message == "12 elements differ"
    assert result.checks == checks
    assert result.seconds == 3.25
    assert result.deterministic is None
    assert result.stderr_tail == "warning"


def test_it_reads_a_passing_verdict_file(tmp_path):
    verdict = write_verdict(
        tmp_path / "verdict.json",
        ok=True,
        reason="ok",
        message="all checks passed",
        deterministic=True,
    )
    result = interpret(process(), verdict, 180)
    assert (result.ok, result.reason, result.deterministic) == (True, "ok", True)


def test_a_verdict_without_seconds_takes_the_process_time(tmp_path):
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"ok": True, "reason": "ok", "message": "fine"}))
    result = interpret(process(seconds=7.0), verdict, 180)
    assert result.seconds == 7.0
    assert result.checks == []


def test_it_keeps_only_the_last_4000_characters_of_stderr(tmp_path):
    stderr = "x" * 5000 + "the end"
    result = interpret(process(returncode=1, stderr=stderr), tmp_path / "verdict.json", 180)
    assert len(result.stderr_tail) == 4000
    assert result.stderr_tail.endswith("the end")


def test_a_result_serialises_every_field(tmp_path):
    result = VerifyResult(False, "wrong", "bad", checks=[{"name": "x"}], seconds=1.0)
    assert result.to_dict() == {
        "ok": False,
        "reason": "wrong",
        "message": "bad",
        "checks": [{"name": "x"}],
        "seconds": 1.0,
        "deterministic": None,
        "stderr_tail": "",
        "startup_s": {},
        "phases_s": {},
        "busy_stream": "",
    }
    json.dumps(result.to_dict())


def test_a_child_killed_over_its_memory_limit_is_rejected_for_memory(tmp_path):
    killed = killed_for_memory(
        "python -m engine.verify.gpu_checks spec.json verdict.json",
        sandbox.Limits(resident_bytes=32 << 30),
    )
    result = interpret(killed, tmp_path / "verdict.json", 180)
    assert (result.ok, result.reason) == (False, "memory")
    assert "32 GiB" in result.message
    assert result.stderr_tail == "allocating"


def test_the_verifier_child_gets_the_candidate_environment(
    tmp_path, monkeypatch, verifier_sandboxes
):
    """A stand-in for python that reports the environment it was given as its verdict; it runs
    under the GPU children's sandbox policy (what the GPU tests assert of every verification)."""
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:password@db/gemmforge")
    fake_python = environment_reporting_python(tmp_path)
    result = verify(tmp_path / "lib.so", Problem(64, 64, 64), seed=7, python=str(fake_python))
    assert result.ok, result
    env = json.loads(result.message)
    assert "SECRET_KEY" not in env
    assert "DATABASE_URL" not in env
    assert env["GEMMFORGE_SEED"] == "7"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(verify_module.__file__).parents[2])
    assert Path(env["HOME"]).name == "home"
    assert env["TMPDIR"] == env["HOME"]
    verifier_sandboxes.assert_all_sandboxed()


def test_every_reason_interpret_produces_itself_is_a_known_reason(tmp_path):
    produced = {
        interpret(process(returncode=None, timed_out=True), tmp_path / "none", 1).reason,
        interpret(process(returncode=1), tmp_path / "none", 1).reason,
        interpret(
            ProcessResult("x", None, "", "", 1.0, False, killed_for="memory"), tmp_path / "n", 1
        ).reason,
    }
    assert produced == {"timeout", "crash", "memory"}
    assert produced <= set(REASONS)
    assert "ok" in REASONS


def test_there_are_bad_kernel_fixtures():
    assert len(harness_kernels.bad_kernel_paths()) >= 5


@pytest.mark.parametrize("path", harness_kernels.bad_kernel_paths(), ids=lambda p: p.stem)
def test_every_reason_a_fixture_kernel_expects_is_a_known_reason(path):
    reason = harness_kernels.expected_reason(path)
    assert reason in REASONS
    assert reason != "ok"


def test_expected_reason_complains_about_a_fixture_without_an_expect_line(tmp_path):
    source = tmp_path / "nameless.cu"
    source.write_text("// a kernel\n")
    with pytest.raises(ValueError, match="expect"):
        harness_kernels.expected_reason(source)


def test_the_childs_start_up_times_reach_the_result(tmp_path):
    verdict = write_verdict(
        tmp_path / "verdict.json",
        ok=True,
        reason="ok",
        startup_s={"start": 7.1, "cuda_init": 0.4},
        phases_s={"session": 0.8, "checks": 3.9},
    )
    result = interpret(process(), verdict, 20)
    assert result.startup_s == {"start": 7.1, "cuda_init": 0.4}
    assert result.to_dict()["startup_s"] == {"start": 7.1, "cuda_init": 0.4}
    assert result.phases_s == {"session": 0.8, "checks": 3.9}
    older = interpret(process(), write_verdict(tmp_path / "old.json"), 20)  # a child without them
    assert (older.startup_s, older.phases_s) == ({}, {})


def test_a_batch_reports_min_median_and_max_of_its_childrens_times():
    from engine.execution.executor import child_startup

    verdicts = [
        VerifyResult(
            True,
            "ok",
            "",
            startup_s={"start": s, "cuda_init": s / 10},
            phases_s={"session": s / 2, "checks": s * 2},
        )
        for s in (9.0, 3.0, 5.0)
    ]
    verdicts.append(VerifyResult(False, "crash", "no verdict"))  # no times: left out
    assert child_startup(verdicts) == {
        "verification_start_s": [3.0, 5.0, 9.0],
        "verification_cuda_init_s": [0.3, 0.5, 0.9],
        "verification_session_s": [1.5, 2.5, 4.5],
        "verification_checks_s": [6.0, 10.0, 18.0],
    }
    assert child_startup([]) == {}


def test_the_child_learns_when_it_was_launched(tmp_path, verifier_sandboxes):
    """The spec carries the parent's launch time, so the child can report its own start-up."""
    fake_python = tmp_path / "python"
    fake_python.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time\n"
        "spec = json.load(open(sys.argv[3]))\n"
        "start = round(time.time() - spec['launched_at'], 3)\n"
        "verdict = {'ok': True, 'reason': 'ok', 'message': '', 'startup_s': {'start': start}}\n"
        "open(sys.argv[4], 'w').write(json.dumps(verdict))\n"
    )
    fake_python.chmod(0o755)
    before = time.time()
    result = verify(tmp_path / "lib.so", Problem(64, 64, 64), seed=7, python=str(fake_python))
    assert result.ok, result
    assert 0 <= result.startup_s["start"] <= time.time() - before


def test_a_batchs_children_are_forked_by_one_fork_server(tmp_path, verifier_sandboxes):
    """Without a GPU the verdicts are failures; what matters is how the children started."""
    libraries = [tmp_path / f"lib{i}.so" for i in range(3)]
    verdicts = verify_module.Verifications(
        libraries, Problem(64, 64, 64), jobs=3, timeout=120, fork_server=True
    ).results()
    assert [v.ok for v in verdicts] == [False] * 3
    assert len(verifier_sandboxes.commands) == 3
    assert all(c.endswith(FORKED) for c in verifier_sandboxes.commands)
    assert all(applied is not None for applied in verifier_sandboxes)


def test_the_fork_server_can_be_turned_off(tmp_path, verifier_sandboxes, monkeypatch):
    monkeypatch.setenv("ENGINE_VERIFY_FORK_SERVER", "off")
    verify_module.Verifications([tmp_path / "lib.so"], Problem(64, 64, 64), timeout=120).results()
    assert not verifier_sandboxes.commands[0].endswith(FORKED)


def test_a_child_starts_fresh_when_the_fork_server_is_gone(tmp_path, verifier_sandboxes):
    server = ForkServer(["json"], env={}, cwd=tmp_path)
    server.close()
    verify(tmp_path / "lib.so", Problem(64, 64, 64), timeout=120, fork_server=server)
    assert verifier_sandboxes.commands[0].startswith(sys.executable)
