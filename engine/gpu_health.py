"""A GPU health probe, run after every GPU step: nvidia-smi answers, and a tiny CUDA call
succeeds in a child process (the caller never initialises CUDA itself).

The CUDA call is a kernel launched through libcuda alone (engine.cuda_driver: a fraction of a
second); only when that fails does a torch child (seconds: torch's import and context) decide,
so a fault in the fast path costs time, never a healthy GPU's queue."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine import cuda_driver, toolchain

SMI_QUERY = "name,temperature.gpu,utilization.gpu,memory.used,memory.total"
CUDA_CALL = (
    "import torch; x = torch.ones(1024, device='cuda'); torch.cuda.synchronize(); "
    "assert float(x.sum()) == 1024.0"
)


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    message: str  # nvidia-smi's line when ok; what failed otherwise
    call: str = ""  # which CUDA call decided: "driver" (libcuda) or "torch (why not driver)"


def probe(device: str = "0", *, timeout: float = float(toolchain.Timeout.PROBE)) -> Health:
    """Never raises for a sick GPU (that is the result). nvidia-smi and the driver probe run
    side by side: each is a process start and a call into the driver, ≈ 0.36 s of every GPU step
    on the H200 one after the other (run 13)."""
    if not _have("nvidia-smi"):
        return Health(False, "nvidia-smi is not on PATH")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device}
    smi_query = [
        "nvidia-smi",
        f"--id={device}",
        f"--query-gpu={SMI_QUERY}",
        "--format=csv,noheader",
    ]
    # -I: the engine's folder is not put on sys.path (its modules would shadow the stdlib's)
    driver = [sys.executable, "-I", str(Path(cuda_driver.__file__)), "probe"]
    with ThreadPoolExecutor(2, thread_name_prefix="gpu-health") as pool:
        smi_run = pool.submit(toolchain.run, smi_query, timeout=timeout, env=env)
        fast_run = pool.submit(toolchain.run, driver, timeout=timeout, env=env)
        smi, fast = smi_run.result(), fast_run.result()
    if not smi.ok:
        return Health(False, f"nvidia-smi failed: {(smi.stderr or smi.stdout).strip()[-500:]}")
    if fast.ok:
        return Health(True, smi.stdout.strip(), "driver")
    call = toolchain.run([sys.executable, "-c", CUDA_CALL], timeout=timeout, env=env)
    if not call.ok:
        why = "timed out" if call.timed_out else call.stderr.strip()[-500:]
        return Health(False, f"CUDA call failed on GPU {device}: {why}", "torch")
    why_not = "timed out" if fast.timed_out else (fast.stderr or fast.stdout).strip()[-200:]
    return Health(True, smi.stdout.strip(), f"torch (the driver probe failed: {why_not})")


def _have(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None
