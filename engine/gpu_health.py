"""A GPU health probe, run after every GPU step: nvidia-smi answers, and a tiny CUDA call
succeeds in a child process (the caller never initialises CUDA itself)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from engine import toolchain

SMI_QUERY = "name,temperature.gpu,utilization.gpu,memory.used,memory.total"
CUDA_CALL = (
    "import torch; x = torch.ones(1024, device='cuda'); torch.cuda.synchronize(); "
    "assert float(x.sum()) == 1024.0"
)


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    message: str  # nvidia-smi's line when ok; what failed otherwise


def probe(device: str = "0", *, timeout: float = float(toolchain.Timeout.PROBE)) -> Health:
    """Never raises for a sick GPU (that is the result)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device}
    smi = toolchain.run(
        ["nvidia-smi", f"--id={device}", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader"],
        timeout=timeout,
        env=env,
    ) if _have("nvidia-smi") else None  # fmt: skip
    if smi is None:
        return Health(False, "nvidia-smi is not on PATH")
    if not smi.ok:
        return Health(False, f"nvidia-smi failed: {(smi.stderr or smi.stdout).strip()[-500:]}")
    call = toolchain.run([sys.executable, "-c", CUDA_CALL], timeout=timeout, env=env)
    if not call.ok:
        why = "timed out" if call.timed_out else call.stderr.strip()[-500:]
        return Health(False, f"CUDA call failed on GPU {device}: {why}")
    return Health(True, smi.stdout.strip())


def _have(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None
