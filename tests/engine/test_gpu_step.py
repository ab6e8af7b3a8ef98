"""engine.gpu_step's local path: the executor gets its tuning, and the compile cache is asked for
the GPU's own arch (the keys the compile step and carried kernels use)."""

from __future__ import annotations

from types import SimpleNamespace

from engine import gpu_step
from engine.campaign import executor as executor_module
from engine.campaign import loop
from engine.families.library import library
from engine.problem import Layout, Problem


def test_the_local_step_passes_its_tuning_and_compiles_for_the_gpus_arch(monkeypatch):
    config = library("sm90", Layout.NN)[0]
    made, compiled = [], []

    class FakeExecutor:
        arch = "sm_90"

        def __init__(self, **kwargs):
            made.append(kwargs)

        def execute(self, problem, batch):
            return [executor_module.Outcome(c.name, "ok", seconds=1e-3) for c in batch]

    def fake_compile(configs, *, target_arch=None, **_):
        compiled.append(target_arch)
        return [SimpleNamespace(ok=True, library="/lib.so", error="") for _ in configs]

    monkeypatch.setattr(executor_module, "LocalGpuExecutor", FakeExecutor)
    monkeypatch.setattr(loop, "compile_configs", fake_compile)
    batch = [{"name": config.name, "family": config.FAMILY, "knobs": config.knobs()}]
    outcomes = gpu_step.run_batch(
        "local", Problem.parse("4096x4096x4096", "nn"), batch, verify_jobs=6, device_seconds=4
    )
    assert made == [{"verify_jobs": 6, "device_seconds": 4}]
    assert compiled == ["sm_90"]
    assert [(o["name"], o["status"]) for o in outcomes] == [(config.name, "ok")]
