"""The web app's GPU step child (``python -m engine.execution.gpu_step``) runs in the candidate
sandbox of engine.isolation.sandbox: the allow-listed environment (none of the worker's
secrets), a private HOME and TMPDIR, an empty working directory, the GPU children's limits, the
worker's GPU pinned."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest import mock

import pytest

from engine.execution import gpu_child
from engine.isolation import processes, sandbox
from engine.problem import Problem as EngineProblem
from tests.engine.process_fakes import killed_for_memory
from webapp.campaigns import runner

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
PROBLEM = "4096x4096x4096_tn"
WORKER_SECRETS = {
    "SECRET_KEY": "django-secret",
    "DATABASE_URL": "postgres://user:password@db/gemmforge",
    "CELERY_BROKER_URL": "redis://:password@redis:6379/0",
    "GEMMFORGE_SECRET": "s3cret",
    "GEMMFORGE_LLM_API_KEY": "sk-1",
    "AWS_SECRET_ACCESS_KEY": "aws-s3cret",
    "ENGINE_DATABASE_URL": "postgres://user:password@db/gemmforge",  # allowed prefix, secret name
}


def rows_for(problem_key: str, count: int) -> list[mock.Mock]:
    """Candidate rows (only what run_gpu_child reads) for configs the recorded run has times for."""
    shape, _, layout = problem_key.rpartition("_")
    table = runner.replay_table(runner.executor_spec())
    configs = table.configs_for(EngineProblem.parse(shape, layout))[:count]
    rows = []
    for config in configs:
        row = mock.Mock(family=config.FAMILY, config=config.knobs())
        row.name = config.name
        rows.append(row)
    return rows


def reporting_python(tmp_path: Path) -> Path:
    """A stand-in for python that writes what it ran under as the step's outcomes (--out)."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import importlib.util, json, os, resource, sys\n"
        "argv = sys.argv[1:]\n"
        "report = {\n"
        "    'argv': argv,\n"
        "    'env': dict(os.environ),\n"
        "    'cwd': os.getcwd(),\n"
        "    'cwd_entries': sorted(os.listdir('.')),\n"
        "    'engine': importlib.util.find_spec('engine').origin,\n"
        "    'core': resource.getrlimit(resource.RLIMIT_CORE)[0],\n"
        "    'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[0],\n"
        "    'user_ns': os.readlink('/proc/self/ns/user'),\n"
        "}\n"
        "open(argv[argv.index('--out') + 1], 'w').write(json.dumps({'outcomes': report}))\n"
    )
    fake.chmod(0o755)
    return fake


@pytest.fixture
def spied_runs(monkeypatch) -> list[tuple[list[str], dict, processes.ProcessResult]]:
    """Every processes.run of the runner, passed through to the real one and recorded."""
    calls: list[tuple[list[str], dict, processes.ProcessResult]] = []
    real_run = processes.run

    def spy(argv, **kwargs):
        result = real_run(argv, **kwargs)
        calls.append((list(argv), kwargs, result))
        return result

    monkeypatch.setattr(runner.processes, "run", spy)
    return calls


def test_the_gpu_step_child_gets_the_candidate_environment_and_the_gpu_sandbox(
    settings, monkeypatch, tmp_path, spied_runs
):
    settings.GEMMFORGE_EXECUTOR = "local"
    settings.GEMMFORGE_GPU_DEVICE = "3"
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "webapp.settings_test")
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGINE_CHILD_FILE_SIZE_MB", "64")
    monkeypatch.setattr(gpu_child.sys, "executable", str(reporting_python(tmp_path)))
    row = mock.Mock(family="sm90", config={}, id=1)
    row.name = "k"
    report = runner.run_gpu_child(PROBLEM, [row])
    [(_argv, kwargs, result)] = spied_runs
    assert kwargs["policy"] == sandbox.gpu_policy()
    assert result.sandbox is not None
    assert "resident memory" in result.sandbox.describe()
    env = report["env"]
    for name in [*WORKER_SECRETS, "DJANGO_SETTINGS_MODULE"]:
        assert name not in env
    assert not [name for name in env if sandbox.is_secret(name)]
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["ENGINE_CACHE_DIR"] == str(tmp_path / "cache")  # the compile step's cache
    # its own working directory (the batch and a private HOME only), not the repository
    workdir = Path(report["cwd"])
    assert workdir != Path(settings.BASE_DIR)
    assert workdir.name.startswith("gemmforge-gpu-")
    assert report["cwd_entries"] == ["batch.json", "home"]
    assert env["HOME"] == env["TMPDIR"] == str(workdir / "home")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(settings.BASE_DIR)
    assert report["engine"] == str(Path(settings.BASE_DIR) / "engine" / "__init__.py")
    assert report["argv"][:2] == ["-m", "engine.execution.gpu_step"]
    assert report["core"] == 0
    assert report["fsize"] == 64 << 20
    assert report["user_ns"] == os.readlink("/proc/self/ns/user")


def test_the_real_gpu_step_child_runs_a_replayed_batch_inside_the_sandbox(
    settings, tmp_path, spied_runs
):
    """engine.execution.gpu_step itself works from the empty working directory with the allow-listed
    environment; a relative execution log still lands in the repository's frame."""
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    log = tmp_path / "executions.log"
    settings.GEMMFORGE_EXECUTION_LOG = os.path.relpath(log, settings.BASE_DIR)
    rows = rows_for(PROBLEM, 2)
    outcomes = runner.run_gpu_child(PROBLEM, rows)
    assert [o["name"] for o in outcomes] == [r.name for r in rows]
    assert all(o["status"] == "ok" for o in outcomes), outcomes
    [(argv, kwargs, result)] = spied_runs
    assert kwargs["policy"] == sandbox.gpu_policy()
    assert result.sandbox is not None
    logged_to = Path(argv[argv.index("--execution-log") + 1])
    assert logged_to.is_absolute()
    assert logged_to.resolve() == log.resolve()
    executed = [line for line in log.read_text().splitlines() if not line.startswith("#")]
    assert executed == [f"{PROBLEM} {r.name}" for r in rows]


def test_a_gpu_step_stopped_by_its_sandbox_crashes_the_step_and_says_why(settings, monkeypatch):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    monkeypatch.setenv("ENGINE_CHILD_MEMORY_GB", "8")

    def killed(argv, **kwargs):
        return killed_for_memory("python -m engine.execution.gpu_step", kwargs["policy"].limits)

    monkeypatch.setattr(runner.processes, "run", killed)
    with pytest.raises(runner.StepCrashed, match=r"memory.*resident memory 8 GiB"):
        runner.run_gpu_child(PROBLEM, rows_for(PROBLEM, 1))


def test_the_step_child_environment_pins_the_gpu_and_drops_the_workers_secrets(
    settings, monkeypatch, tmp_path
):
    settings.GEMMFORGE_GPU_DEVICE = "1"
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    env = runner.gpu_child_env(tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "SECRET_KEY" not in env
    assert env["HOME"] == str(tmp_path / "home")
    assert json.dumps(env)  # plain strings only


def test_the_gpu_step_children_share_one_autotune_cache(tmp_path, monkeypatch):
    """Every step's child gets a private HOME, but the engine cache (and with it cuBLASLt's
    autotune file, keyed by GPU, driver, CUDA and cuBLASLt only) is the worker's: a shape is
    autotuned by the first step that times it, not by every step."""
    from engine.config import EngineConfig
    from engine.timing import baselines

    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "step1").mkdir()
    (tmp_path / "step2").mkdir()
    first = runner.gpu_child_env(tmp_path / "step1")
    second = runner.gpu_child_env(tmp_path / "step2")
    assert first["HOME"] != second["HOME"]
    assert first["ENGINE_CACHE_DIR"] == second["ENGINE_CACHE_DIR"] == str(tmp_path / "cache")
    paths = {
        baselines.autotune_cache_path(EngineConfig(cache_dir=Path(env["ENGINE_CACHE_DIR"])), "k")
        for env in (first, second)
    }
    assert paths == {tmp_path / "cache" / "baselines" / "cublaslt_autotune_k.json"}
