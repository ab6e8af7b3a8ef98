"""The standby GPU step child: while a step runs, the worker starts the next step's child
(``python -m engine.execution.gpu_step --standby``), which imports torch and starts its
verifications' fork server before its batch comes. It runs in the same sandbox as any step child;
one that died, or was started for other settings, is replaced by a fresh child. Replayed steps (no
GPU)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from unittest import mock

import pytest

from engine.isolation import sandbox
from engine.problem import Problem as EngineProblem
from webapp.campaigns import runner

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
PROBLEM = "4096x4096x4096_tn"


@pytest.fixture
def standby(settings, tmp_path):
    """Replayed steps through standby children; each executed step logs its child's pid."""
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    settings.GEMMFORGE_GPU_STANDBY = True
    settings.GEMMFORGE_EXECUTION_LOG = str(tmp_path / "executions.log")
    runner.standby_discard()
    yield tmp_path / "executions.log"
    runner.standby_discard()


def rows_for(count: int) -> list[mock.Mock]:
    shape, _, layout = PROBLEM.rpartition("_")
    table = runner.replay_table(runner.executor_spec())
    rows = []
    for config in table.configs_for(EngineProblem.parse(shape, layout))[:count]:
        row = mock.Mock(family=config.FAMILY, config=config.knobs())
        row.name = config.name
        rows.append(row)
    return rows


def step_pids(log: Path) -> list[int]:
    return [int(line.split()[2]) for line in log.read_text().splitlines() if line.startswith("#")]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


@pytest.mark.slow
def test_the_next_steps_child_is_started_while_this_step_runs(standby):
    first = runner.run_gpu_child(PROBLEM, rows_for(2))
    waiting = runner._standby
    assert waiting is not None
    assert waiting.running.alive()  # started during the first step, waiting for its batch
    second = runner.run_gpu_child(PROBLEM, rows_for(3))
    assert [o["status"] for o in first + second] == ["ok"] * 5
    pids = step_pids(standby)
    assert len(pids) == 2
    assert pids[1] == waiting.running.proc.pid
    assert not Path(waiting.workdir).exists()  # its working directory went with its step


def test_the_next_steps_child_warms_its_verifiers_after_this_steps_verdicts(standby, settings):
    """It watches the mark this step's child creates once verified (ENGINE_VERIFY_WARM)."""
    settings.GEMMFORGE_VERIFY_JOBS = 12
    taken = runner.standby_take(runner.executor_spec())
    waiting = runner._standby
    assert waiting is not None
    argv = waiting.running.proc.args
    assert argv[argv.index("--warm-after") + 1] == str(taken.workdir / runner.VERIFIED_MARK)
    assert argv[argv.index("--warm-verifiers") + 1] == "12"
    taken.discard()


def test_a_standby_child_waits_in_the_step_childs_sandbox(standby, settings, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:password@db/gemmforge")
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    settings.GEMMFORGE_GPU_DEVICE = "2"
    runner.run_gpu_child(PROBLEM, rows_for(1))
    waiting = runner._standby
    assert waiting is not None
    assert waiting.running.sandbox is not None
    assert waiting.running.sandbox.limits == sandbox.gpu_policy().limits
    env = environ_of(waiting.running.proc.pid)
    assert "DATABASE_URL" not in env
    assert "SECRET_KEY" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert env["HOME"] == str(waiting.workdir / "home")
    assert os.getsid(waiting.running.proc.pid) == waiting.running.proc.pid


@pytest.mark.slow
def test_a_standby_child_that_died_is_replaced_by_a_fresh_one(standby):
    runner.run_gpu_child(PROBLEM, rows_for(1))
    waiting = runner._standby
    assert waiting is not None
    waiting.running.proc.kill()
    waiting.running.proc.wait()
    outcomes = runner.run_gpu_child(PROBLEM, rows_for(2))
    assert [o["status"] for o in outcomes] == ["ok", "ok"]
    assert step_pids(standby)[-1] != waiting.running.proc.pid


@pytest.mark.slow
def test_a_standby_child_started_for_another_gpu_is_not_used(standby, settings):
    runner.run_gpu_child(PROBLEM, rows_for(1))
    waiting = runner._standby
    assert waiting is not None
    settings.GEMMFORGE_GPU_DEVICE = "5"
    runner.run_gpu_child(PROBLEM, rows_for(1))
    assert step_pids(standby)[-1] != waiting.running.proc.pid
    deadline = time.monotonic() + 10
    while waiting.running.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not waiting.running.alive()


def test_a_discarded_standby_child_ends(standby):
    runner.run_gpu_child(PROBLEM, rows_for(1))
    waiting = runner._standby
    assert waiting is not None
    runner.standby_discard()
    assert not waiting.running.alive()
    assert runner._standby is None


def test_a_pool_process_ending_ends_its_standby_child_and_its_mps_daemon(standby, monkeypatch):
    """Celery's pool processes end without atexit; worker_process_shutdown does the cleanup."""
    from celery.signals import worker_process_shutdown

    from engine.gpu import mps

    stopped = []
    monkeypatch.setattr(mps, "stop_started", lambda: stopped.append(True))
    runner.run_gpu_child(PROBLEM, rows_for(1))
    waiting = runner._standby
    assert waiting is not None
    worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert not waiting.running.alive()
    assert runner._standby is None
    assert stopped == [True]
