"""engine.execution.gpu_step's local path: the executor gets its tuning, and the compile cache is
asked for the GPU's own arch (the keys the compile step and carried kernels use); the verification
children start before the step imports torch; the step reports where its time went; a standby child
prepares (imports, fork server) before it reads its step."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.codegen.library import library
from engine.compilation import compile as compile_module
from engine.execution import executor as executor_module
from engine.execution import gpu_step
from engine.gpu import cuda_driver
from engine.problem import Layout, Problem
from engine.verify import verifier as verify_module

ROOT = Path(__file__).resolve().parents[3]
RECORDED_RUN = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"


def test_the_local_step_passes_its_tuning_and_compiles_for_the_gpus_arch(monkeypatch):
    config = library("sm90", Layout.NN)[0]
    made, compiled, executed = [], [], []

    class FakeExecutor:
        def __init__(self, **kwargs):
            made.append(kwargs)
            self.arch = kwargs["arch"]

        def execute(self, problem, batch, *, verifications, phases):
            executed.append([str(p) for p in verifications.libraries])
            return [executor_module.Outcome(c.name, "ok", seconds=1e-3) for c in batch]

    def fake_compile(configs, *, target_arch=None, **_):
        compiled.append(target_arch)
        return [SimpleNamespace(ok=True, library="/lib.so", error="") for _ in configs]

    monkeypatch.setattr(gpu_step, "LocalGpuExecutor", FakeExecutor)
    monkeypatch.setattr(compile_module, "compile_configs", fake_compile)
    monkeypatch.setattr(cuda_driver, "local_arch", lambda: "sm_90")
    monkeypatch.setattr(verify_module, "verify", lambda *a, **k: None)
    batch = [{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}]
    outcomes = gpu_step.run_batch(
        "local", Problem.parse("4096x4096x4096", "nn"), batch, verify_jobs=6, device_seconds=4
    )
    assert callable(made[0].pop("after_verification"))
    assert made == [
        {
            "protocols": ("device",),  # the campaign's reward protocol (--protocol)
            "arch": "sm_90",
            "verify_jobs": 6,
            "device_seconds": 4,
            "shim": None,
        }
    ]
    assert compiled == ["sm_90"]
    assert executed == [["/lib.so"]]
    assert [(o["name"], o["status"]) for o in outcomes] == [(config.name, "ok")]


def test_verification_children_start_before_the_step_imports_torch(tmp_path):
    """A fresh interpreter, as the worker starts it: torch (seconds to import, then its CUDA
    context) comes after the verification children are on their way, not before."""
    script = textwrap.dedent(
        """
        import json, sys
        from types import SimpleNamespace
        from engine.compilation import compile as compile_module
        from engine.execution import gpu_step
        from engine.gpu import cuda_driver
        from engine.verify import verifier as verify_module
        from engine.codegen.library import library
        from engine.problem import Layout, Problem

        seen = {}
        compile_module.compile_configs = lambda configs, **_: [
            SimpleNamespace(ok=True, library="/lib.so", error="") for _ in configs
        ]
        cuda_driver.local_arch = lambda: "sm_90"

        class Stop(Exception):
            pass

        class Spy:
            def __init__(self, libraries, problem, *, jobs, **_options):
                seen["torch_loaded"] = "torch" in sys.modules
                seen["jobs"] = jobs
                raise Stop

        verify_module.Verifications = Spy
        config = library("sm90", Layout.NN)[0]
        batch = [{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}]
        try:
            gpu_step.run_batch("local", Problem.parse("1024x1024x1024", "nn"), batch,
                               verify_jobs=3)
        except Stop:
            pass
        print(json.dumps(seen))
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == {"torch_loaded": False, "jobs": 3}


def test_the_step_child_reports_its_phases_with_its_outcomes(tmp_path):
    batch_file, out = tmp_path / "batch.json", tmp_path / "out.json"
    from engine.execution.executor import ReplayTable

    table = ReplayTable.load([RECORDED_RUN])
    problem = table.problems()[0]
    config = table.configs_for(problem)[0]
    batch_file.write_text(
        json.dumps([{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}])
    )
    code = gpu_step.main(
        ["--executor", f"replay:{RECORDED_RUN}", "--problem", problem.key,
         "--batch", str(batch_file), "--out", str(out), "--delay-ms", "50"]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert [(o["name"], o["status"]) for o in data["outcomes"]] == [(config.name, "ok")]
    phases = data["phases_s"]
    assert {"imports", "timing", "other"} <= set(phases)
    assert phases["timing"] >= 0.05  # the replay's stand-in for the GPU's time
    assert data["started_at"] <= data["finished_at"]
    assert sum(phases.values()) <= data["finished_at"] - data["started_at"] + 0.01


def stdin_with(monkeypatch, text: str | None):
    """sys.stdin from a pipe holding ``text`` (closed after it; left open when None)."""
    read_end, write_end = os.pipe()
    if text is not None:
        os.write(write_end, text.encode())
        os.close(write_end)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end))
    return write_end


def standby_args(**overrides) -> argparse.Namespace:
    values = {
        "executor": "local",
        "parent_pid": os.getppid(),
        "standby_seconds": 5.0,
        "warm_after": None,
        "warm_verifiers": 1,
    }
    return argparse.Namespace(**{**values, **overrides})


def test_a_standby_child_prepares_then_runs_the_step_it_reads(monkeypatch):
    started, ran = [], []
    server = object()

    def new_fork_server(*, start):
        started.append(start)
        return server, None

    monkeypatch.setattr(verify_module, "new_fork_server", new_fork_server)
    monkeypatch.setattr(verify_module, "fork_server_on", lambda: True)
    monkeypatch.setattr(
        gpu_step, "main", lambda argv, fork_server, warmed: ran.append((argv, fork_server))
    )
    step = ["--executor", "local", "--problem", "64x64x64_nn", "--batch", "b", "--out", "o"]
    stdin_with(monkeypatch, json.dumps(step) + "\n")
    gpu_step.standby(standby_args())
    assert started == [True]  # the fork server was started before the step came
    assert ran == [(step, server)]
    assert all(module in sys.modules for module in gpu_step.STANDBY_IMPORTS)


def test_a_standby_child_without_a_step_exits(monkeypatch):
    monkeypatch.setattr(gpu_step, "main", lambda *a, **k: pytest.fail("no step was given"))
    stdin_with(monkeypatch, "")  # end of input: the worker discarded it
    assert gpu_step.standby(standby_args(executor="replay:x")) == 0
    stdin_with(monkeypatch, None)  # nothing within --standby-seconds
    clock = time.monotonic()
    assert gpu_step.standby(standby_args(executor="replay:x", standby_seconds=0.2)) == 0
    assert time.monotonic() - clock < 2


def test_the_local_step_marks_its_batch_verified_before_it_is_timed(monkeypatch, tmp_path):
    """The mark tells the next step's standby child that its warm verifiers may start now."""
    config = library("sm90", Layout.NN)[0]
    marks = []

    class FakeExecutor:
        def __init__(self, **kwargs):
            self.after_verification = kwargs["after_verification"]

        def execute(self, problem, batch, *, verifications, phases):
            self.after_verification()
            marks.append(mark.exists())
            return [executor_module.Outcome(c.name, "ok", seconds=1e-3) for c in batch]

    mark = tmp_path / "verified"
    monkeypatch.setattr(gpu_step, "LocalGpuExecutor", FakeExecutor)
    monkeypatch.setattr(
        compile_module,
        "compile_configs",
        lambda configs, **_: [SimpleNamespace(ok=True, library="/lib.so", error="")] * len(configs),
    )
    monkeypatch.setattr(cuda_driver, "local_arch", lambda: "sm_90")
    monkeypatch.setattr(verify_module, "verify", lambda *a, **k: None)
    batch = [{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}]
    gpu_step.run_batch("local", Problem.parse("4096x4096x4096", "nn"), batch, verified_mark=mark)
    assert marks == [True]


def warm_standby(monkeypatch, mark: Path, setting: str) -> list:
    """A standby child whose fork server and warm verifiers are recorded, not started."""
    monkeypatch.setenv("ENGINE_VERIFY_WARM", setting)
    monkeypatch.setattr(verify_module, "fork_server_on", lambda: True)
    monkeypatch.setattr(verify_module, "new_fork_server", lambda *, start: ("server", None))
    events = []

    def warm_pool(server, count):
        events.append(("warm", server, count, mark.exists()))
        return "pool"

    monkeypatch.setattr(verify_module.WarmPool, "for_this_process", staticmethod(warm_pool))
    monkeypatch.setattr(gpu_step, "prepare_measurement", lambda: events.append("context") or "shim")
    monkeypatch.setattr(
        gpu_step, "main", lambda argv, fork_server, warmed: events.append(("step", warmed))
    )
    return events


def test_a_standby_child_warms_up_once_the_step_before_is_verified(monkeypatch, tmp_path):
    mark = tmp_path / "verified"
    events = warm_standby(monkeypatch, mark, "on")
    write_end = stdin_with(monkeypatch, None)
    step = ["--executor", "local", "--problem", "64x64x64_nn", "--batch", "b", "--out", "o"]

    def the_step_before_then_this_one() -> None:
        time.sleep(0.3)
        assert events == []  # nothing warmed while the step before still verifies
        mark.touch()
        time.sleep(0.3)
        os.write(write_end, (json.dumps(step) + "\n").encode())

    thread = threading.Thread(target=the_step_before_then_this_one)
    thread.start()
    gpu_step.standby(standby_args(warm_after=mark, warm_verifiers=12))
    thread.join()
    # the verifiers' contexts first, then the measurement's own
    assert events == [
        ("warm", "server", 12, True),
        "context",
        ("step", gpu_step.Warmed("pool", "shim")),
    ]


def test_a_standby_child_warms_nothing_when_the_setting_is_off(monkeypatch, tmp_path):
    mark = tmp_path / "verified"
    mark.touch()
    events = warm_standby(monkeypatch, mark, "off")
    step = ["--executor", "local", "--problem", "64x64x64_nn", "--batch", "b", "--out", "o"]
    stdin_with(monkeypatch, json.dumps(step) + "\n")
    gpu_step.standby(standby_args(warm_after=mark, warm_verifiers=12))
    assert events == [("step", None)]


def test_the_executor_forks_the_next_batchs_warm_verifiers_after_verification(monkeypatch):
    monkeypatch.setenv("ENGINE_VERIFY_WARM", "on")
    pools = []
    monkeypatch.setattr(
        verify_module.WarmPool,
        "for_this_process",
        staticmethod(lambda server, count: pools.append((server, count)) or f"pool{len(pools)}"),
    )
    executor = executor_module.LocalGpuExecutor(arch="sm_90", verify_jobs=7)
    monkeypatch.setattr(executor, "_verification_fork_server", lambda: "server")
    executor._after_verification()
    assert pools == [("server", 7)]
    assert executor._take_warm() == "pool1"
    assert executor._take_warm() is None  # each pool serves one batch
