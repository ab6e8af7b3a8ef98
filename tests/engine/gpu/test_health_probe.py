"""engine.gpu.health_probe's per-step probe: a kernel through libcuda alone (a fraction of
a second) decides; only when it fails does the torch child (seconds) run, so a fault of the fast
path costs time but never stops a healthy GPU's queue. engine.gpu.cuda_driver without a GPU."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.gpu import cuda_driver, health_probe
from engine.isolation import processes


def result(ok: bool, stderr: str = "") -> processes.ProcessResult:
    line = "NVIDIA H200, 30, 0 %"
    return processes.ProcessResult("cmd", 0 if ok else 1, line, stderr, 0.1, False)


class Ran(list):
    answers: dict[str, bool]


@pytest.fixture
def calls(monkeypatch) -> Ran:
    """Which children the probe ran ("smi", "driver", "torch"), answered from ``answers``."""
    ran = Ran()
    answers = {"smi": True, "driver": True, "torch": True}

    def fake_run(argv, **_kwargs):
        kind = "smi" if argv[0] == "nvidia-smi" else "driver" if "-I" in argv else "torch"
        ran.append(kind)
        return result(answers[kind], f"{kind} failed")

    monkeypatch.setattr(health_probe.processes, "run", fake_run)
    monkeypatch.setattr(health_probe, "_have", lambda program: True)
    ran.answers = answers
    return ran


def test_the_driver_probe_decides_and_torch_is_not_started(calls):
    health = health_probe.probe("0")
    assert (health.ok, health.call) == (True, "driver")
    assert sorted(calls) == ["driver", "smi"]  # side by side


def test_a_failing_driver_probe_falls_back_to_torch(calls):
    calls.answers["driver"] = False
    health = health_probe.probe("0")
    assert health.ok
    assert health.call.startswith("torch")
    assert "driver failed" in health.call
    assert sorted(calls[:2]) == ["driver", "smi"]
    assert calls[2:] == ["torch"]  # only once the driver probe failed


def test_a_gpu_that_fails_both_calls_is_unhealthy(calls):
    calls.answers["driver"] = calls.answers["torch"] = False
    health = health_probe.probe("0")
    assert not health.ok
    assert "CUDA call failed on GPU 0" in health.message


def test_a_gpu_whose_nvidia_smi_fails_is_unhealthy(calls):
    calls.answers["smi"] = False
    health = health_probe.probe("0")
    assert not health.ok
    assert health.message.startswith("nvidia-smi failed")


def test_without_nvidia_smi_nothing_is_started(calls, monkeypatch):
    monkeypatch.setattr(health_probe, "_have", lambda program: False)
    assert health_probe.probe("0") == health_probe.Health(False, "nvidia-smi is not on PATH")
    assert calls == []


# -- the resident probe (health_probe.check) -----------------------------------------------------
def fake_server(*answers: str) -> list[str]:
    """A resident probe that gives ``answers`` in turn, one per request line (``sleep`` hangs)."""
    script = (
        "import sys, time\n"
        f"answers = {list(answers)!r}\n"
        "for answer in answers:\n"
        "    if not sys.stdin.readline(): break\n"
        "    if answer == 'sleep': time.sleep(60)\n"
        "    print(answer, flush=True)\n"
    )
    return [sys.executable, "-c", script]


@pytest.fixture
def fresh(monkeypatch) -> list[bool]:
    """The fresh probe, healthy through libcuda, counted; no resident probe left behind."""
    ran: list[bool] = []

    def probe(device, *, timeout=60.0):
        ran.append(True)
        return health_probe.Health(True, "NVIDIA H200, 30, 0 %", "driver")

    monkeypatch.setattr(health_probe, "probe", probe)
    health_probe.resident_close()
    yield ran
    health_probe.resident_close()


def serve(monkeypatch, *answers: str) -> None:
    argv = fake_server(*answers)
    monkeypatch.setattr(
        health_probe, "ResidentProbe", functools.partial(health_probe.ResidentProbe, argv=argv)
    )


def test_after_a_healthy_fresh_probe_the_resident_probe_answers(fresh, monkeypatch):
    serve(monkeypatch, "ok NVIDIA H200, 31, 0 %, 600 MiB, 143771 MiB", "ok NVIDIA H200, 32, 0 %")
    assert health_probe.check("0").call == "driver"
    second, third = health_probe.check("0"), health_probe.check("0")
    assert (second.ok, second.call, second.message) == (
        True, "resident", "NVIDIA H200, 31, 0 %, 600 MiB, 143771 MiB"
    )  # fmt: skip
    assert (third.ok, third.call) == (True, "resident")
    assert fresh == [True]  # one fresh probe for three checks


def test_a_resident_probe_that_reports_a_fault_hands_the_verdict_to_a_fresh_probe(
    fresh, monkeypatch
):
    serve(monkeypatch, "error cuCtxSynchronize failed: an illegal memory access (700)")
    health_probe.check("0")
    health = health_probe.check("0")
    assert fresh == [True, True]
    assert health.ok  # the fresh probe decided: a new context works
    assert "illegal memory access" in health.call
    assert health_probe._resident is None  # a doubted GPU gets fresh probes until one is clean
    health_probe.check("0")
    assert fresh == [True, True, True]


def test_a_resident_probe_that_hangs_is_killed_after_its_timeout(fresh, monkeypatch):
    serve(monkeypatch, "sleep")
    health_probe.check("0")
    resident = health_probe._resident
    started = time.perf_counter()
    health = health_probe.check("0", timeout=0.5)
    assert time.perf_counter() - started < 5
    assert "did not answer in 0.5 s" in health.call
    assert resident.proc.poll() is not None
    assert fresh == [True, True]


def test_a_resident_probe_that_died_is_replaced_by_a_fresh_probe(fresh, monkeypatch):
    serve(monkeypatch)  # answers nothing: exits at once
    health_probe.check("0")
    health_probe._resident.proc.wait(timeout=30)
    health = health_probe.check("0")
    assert health.ok
    assert "resident probe" in health.call
    assert fresh == [True, True]


def test_after_a_crashed_or_timed_out_step_only_a_fresh_probe_decides(fresh, monkeypatch):
    serve(monkeypatch, "ok NVIDIA H200")
    health_probe.check("0")
    resident = health_probe._resident
    assert health_probe.check("0", fresh=True).call == "driver"
    assert resident.proc.poll() is not None
    assert health_probe._resident is None
    assert fresh == [True, True]


def test_a_probe_of_another_gpu_does_not_ask_this_ones_resident_probe(fresh, monkeypatch):
    serve(monkeypatch, "ok NVIDIA H200", "ok NVIDIA H200")
    health_probe.check("0")
    health_probe.check("1")
    assert fresh == [True, True]
    assert health_probe._resident.device == "1"


def test_the_real_resident_probe_without_a_gpu_says_why_and_exits():
    resident = health_probe.ResidentProbe("")  # CUDA_VISIBLE_DEVICES="": no device anywhere
    try:
        health = resident.ask(timeout=60)
        assert not health.ok
        assert health.message
        assert resident.proc.wait(timeout=30) == 1
    finally:
        resident.close()


def test_the_driver_probe_runs_as_a_script_of_the_standard_library_alone():
    """``python -I cuda_driver.py``: no engine import, no torch; without libcuda it says so."""
    source = Path(cuda_driver.__file__).read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == [
        "from __future__ import annotations",
        "import ctypes",
        "import sys",
        "from collections.abc import Sequence",
    ]
    ran = subprocess.run(
        [sys.executable, "-I", cuda_driver.__file__, "probe"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"CUDA_VISIBLE_DEVICES": ""},  # no device even where a driver is installed
    )
    assert ran.returncode == 1
    assert ran.stderr.strip()


def test_without_libcuda_the_arch_comes_from_torch_or_the_default(monkeypatch):
    with pytest.raises(cuda_driver.DriverError, match="cannot load"):
        cuda_driver.Driver("libcuda-that-is-not-there.so.1")

    def missing(index=0):
        raise cuda_driver.DriverError("no libcuda")

    monkeypatch.setattr(cuda_driver, "device_arch", missing)
    monkeypatch.setitem(sys.modules, "torch", None)  # import fails
    assert cuda_driver.local_arch(default="sm_80") == "sm_80"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_probe_kernel_assembles_for_the_gpus_we_run_on(arch, tmp_path):
    ptx = tmp_path / "probe.ptx"
    ptx.write_bytes(cuda_driver.PROBE_PTX)
    ran = subprocess.run(
        ["ptxas", f"-arch={arch}", str(ptx), "-o", str(tmp_path / "probe.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr


@pytest.mark.gpu
def test_on_a_real_gpu_the_driver_probe_decides_and_agrees_with_torch_on_the_arch():
    """The fast path works where it matters: no torch child after a GPU step on a healthy GPU."""
    import torch

    health = health_probe.probe("0")
    assert health.ok, health.message
    assert health.call == "driver"
    major, minor = torch.cuda.get_device_capability(0)
    assert cuda_driver.device_arch(0) == f"sm_{major}{minor}"


@pytest.mark.gpu
def test_on_a_real_gpu_the_resident_probe_answers_in_milliseconds_with_nvidia_smis_line():
    health_probe.resident_close()
    try:
        first = health_probe.check("0")
        assert (first.ok, first.call) == (True, "driver"), first
        health_probe.check("0")  # waits for the resident probe's set-up
        started = time.perf_counter()
        health = health_probe.check("0")
        took = time.perf_counter() - started
        assert (health.ok, health.call) == (True, "resident"), health
        name, temperature, utilization, used, total = health.message.split(", ")
        assert name == first.message.split(", ")[0]  # nvidia-smi's name for the GPU
        assert int(temperature) > 0
        assert utilization.endswith(" %")
        assert used.endswith(" MiB")
        assert total.endswith(" MiB")
        assert took < 0.1, took
    finally:
        health_probe.resident_close()
