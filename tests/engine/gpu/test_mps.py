"""engine.gpu.mps and MPS in engine.verify.verifier without a GPU: the daemon's start and stop
through a stand-in control binary, who becomes a client, and what a fault among clients costs. The
real daemon's A/B runs on the H200 (bench/verify_profile.py, bench/results/…-run13/)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from engine.config import VERIFY_MPS_PIPE_VARIABLE, VERIFY_MPS_UNAVAILABLE_VARIABLE
from engine.gpu import mps
from engine.problem import Problem
from engine.verify import verifier as verify_module
from engine.verify.verifier import Verifications, VerifyResult, verify
from tests.engine.process_fakes import environment_reporting_python

PROBLEM = Problem(4096, 4096, 4096)

# Answers as nvidia-cuda-mps-control does: -d starts (here: records its pipe folder), and a
# command on stdin is answered when the daemon "runs" (a marker file in the pipe folder).
FAKE_CONTROL = """#!{python}
import os, sys
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
marker = os.path.join(pipe, "running")
if sys.argv[1:] == ["-d"]:
    if {starts}:
        open(marker, "w").close()
    sys.exit(0)
command = sys.stdin.read().strip()
if not os.path.exists(marker):
    sys.exit(1)
if command == "quit":
    os.remove(marker)
open(os.path.join(pipe, "commands"), "a").write(command + "\\n")
"""


def fake_control(tmp_path: Path, *, starts: bool = True) -> str:
    path = tmp_path / "bin" / "nvidia-cuda-mps-control"
    path.parent.mkdir()
    path.write_text(FAKE_CONTROL.format(python=sys.executable, starts=starts))
    path.chmod(0o755)
    return str(path)


def test_it_says_why_when_there_is_no_control_binary(tmp_path):
    outcome = mps.start(tmp_path / "mps", control="no-such-mps-control")
    assert outcome == "no-such-mps-control is not on PATH"


def test_a_started_daemon_answers_and_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    daemon = mps.start(tmp_path / "mps", control=fake_control(tmp_path))
    assert isinstance(daemon, mps.MpsDaemon), daemon
    assert daemon.env()["CUDA_VISIBLE_DEVICES"] == "3"  # one GPU per server
    assert daemon.pipe_dir == tmp_path / "mps" / "pipe"
    assert daemon.answers()
    daemon.stop()
    assert not daemon.answers()
    assert (daemon.pipe_dir / "commands").read_text().splitlines()[-1] == "quit"


def test_a_daemon_that_never_answers_is_reported_not_returned(tmp_path, monkeypatch):
    monkeypatch.setattr(mps, "ANSWER_SECONDS", 0.3)
    outcome = mps.start(tmp_path / "mps", control=fake_control(tmp_path, starts=False))
    assert isinstance(outcome, str)
    assert "did not answer" in outcome


def test_only_the_verification_child_becomes_a_client(tmp_path, monkeypatch, verifier_sandboxes):
    """The pipe reaches the child as CUDA_MPS_PIPE_DIRECTORY; the variable that names it for
    the engine does not, and without a pipe the child gets neither."""
    monkeypatch.setenv(VERIFY_MPS_PIPE_VARIABLE, "/tmp/gemmforge-mps/pipe")
    fake_python = environment_reporting_python(tmp_path)
    client = verify(
        tmp_path / "lib.so", PROBLEM, python=str(fake_python), mps_pipe="/tmp/gemmforge-mps/pipe"
    )
    env = json.loads(client.message)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/gemmforge-mps/pipe"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # the server's one GPU, whichever it is
    assert VERIFY_MPS_PIPE_VARIABLE not in env
    alone = json.loads(verify(tmp_path / "lib.so", PROBLEM, python=str(fake_python)).message)
    assert "CUDA_MPS_PIPE_DIRECTORY" not in alone


def record_calls(monkeypatch, verdict_for):
    calls, lock = [], threading.Lock()

    def fake_verify(library, problem, **kwargs):
        name = Path(library).stem
        with lock:
            calls.append((name, kwargs.get("mps_pipe")))
        return verdict_for(name, kwargs.get("mps_pipe"))

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    return calls


def libraries(*names: str) -> list[Path]:
    return [Path(f"/x/{n}.so") for n in names]


def test_a_batch_under_mps_takes_its_pipe_from_the_environment(monkeypatch):
    monkeypatch.setenv(VERIFY_MPS_PIPE_VARIABLE, "/p")
    calls = record_calls(monkeypatch, lambda name, pipe: VerifyResult(True, "ok", ""))
    batch = Verifications(libraries("a", "b"), PROBLEM, jobs=2, gpu_bytes=141 << 30)
    assert [v.ok for v in batch.results()] == [True, True]
    assert sorted(calls) == [("a", "/p"), ("b", "/p")]
    assert batch.retried_alone == 0


def test_a_lone_verifier_is_never_an_mps_client(monkeypatch):
    monkeypatch.setenv(VERIFY_MPS_PIPE_VARIABLE, "/p")
    calls = record_calls(monkeypatch, lambda name, pipe: VerifyResult(True, "ok", ""))
    Verifications(libraries("a"), PROBLEM, jobs=4).results()
    assert calls == [("a", None)]


def test_a_fault_among_mps_clients_is_verified_again_alone_outside_mps(monkeypatch):
    """The trapping kernel takes its neighbours down with it under MPS; alone and outside MPS
    the neighbours pass and the culprit is still rejected."""

    def verdict_for(name, pipe):
        if name == "trap":
            return VerifyResult(False, "runtime_error", "device-side trap")
        if pipe is not None and name == "victim":
            return VerifyResult(False, "runtime_error", "the MPS server faulted")
        return VerifyResult(True, "ok", "")

    calls = record_calls(monkeypatch, verdict_for)
    batch = Verifications(
        libraries("ok", "trap", "victim"), PROBLEM, jobs=3, gpu_bytes=141 << 30, mps_pipe="/p"
    )
    assert [v.reason for v in batch.results()] == ["ok", "runtime_error", "ok"]
    assert batch.retried_outside_mps == 2
    assert batch.retried_alone == 0
    assert sorted(calls[3:]) == [("trap", None), ("victim", None)]


def test_without_mps_a_fault_is_not_verified_again(monkeypatch):
    calls = record_calls(
        monkeypatch, lambda name, pipe: VerifyResult(False, "runtime_error", "trap")
    )
    batch = Verifications(libraries("a", "b"), PROBLEM, jobs=2, gpu_bytes=141 << 30)
    assert [v.reason for v in batch.results()] == ["runtime_error", "runtime_error"]
    assert len(calls) == 2
    assert batch.retried_outside_mps == 0


@pytest.mark.parametrize("reason", ["wrong", "stream", "timeout"])
def test_a_verdict_a_fault_cannot_cause_is_final_under_mps(monkeypatch, reason):
    record_calls(monkeypatch, lambda name, pipe: VerifyResult(False, reason, "rejected"))
    batch = Verifications(libraries("a", "b"), PROBLEM, jobs=2, gpu_bytes=141 << 30, mps_pipe="/p")
    assert {v.reason for v in batch.results()} == {reason}
    assert batch.retried_outside_mps == 0


def test_ensure_starts_one_daemon_names_it_to_children_and_stops_it_at_exit(tmp_path, monkeypatch):
    monkeypatch.delenv(VERIFY_MPS_PIPE_VARIABLE, raising=False)
    monkeypatch.setenv(VERIFY_MPS_UNAVAILABLE_VARIABLE, "")  # restored after: ensure sets it
    control = fake_control(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(control).parent}:{os.environ['PATH']}")
    monkeypatch.setattr(mps.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "mps"))
    assert mps.ensure_for_verification(False) == "off"
    assert VERIFY_MPS_PIPE_VARIABLE not in os.environ
    said = mps.ensure_for_verification(True, gpu="2")
    assert said == f"on ({tmp_path / 'mps' / 'pipe'}, started)"
    assert os.environ[VERIFY_MPS_PIPE_VARIABLE] == str(tmp_path / "mps" / "pipe")
    assert mps.ensure_for_verification(True).startswith("on (")  # the same one
    mps.stop_started()
    assert VERIFY_MPS_PIPE_VARIABLE not in os.environ
    assert (tmp_path / "mps" / "pipe" / "commands").read_text().splitlines()[-1] == "quit"


def test_ensure_reports_why_mps_is_unavailable(monkeypatch):
    monkeypatch.delenv(VERIFY_MPS_PIPE_VARIABLE, raising=False)
    monkeypatch.setenv(VERIFY_MPS_UNAVAILABLE_VARIABLE, "")  # restored after: ensure sets it
    monkeypatch.setattr(mps, "CONTROL", "no-such-mps-control")
    assert mps.ensure_for_verification(True) == "unavailable: no-such-mps-control is not on PATH"
    assert VERIFY_MPS_PIPE_VARIABLE not in os.environ


def test_a_process_that_could_not_start_a_daemon_does_not_try_again(monkeypatch):
    """Nor do its children (a GPU worker's step children inherit the variable)."""
    monkeypatch.delenv(VERIFY_MPS_PIPE_VARIABLE, raising=False)
    monkeypatch.setenv(VERIFY_MPS_UNAVAILABLE_VARIABLE, "")  # restored after: ensure sets it
    starts = []
    monkeypatch.setattr(mps, "start", lambda **_: starts.append(1) or "did not answer")
    assert mps.ensure_for_verification(True) == "unavailable: did not answer"
    assert mps.ensure_for_verification(True) == "unavailable: did not answer"
    assert starts == [1]
    assert os.environ[VERIFY_MPS_UNAVAILABLE_VARIABLE] == "did not answer"
