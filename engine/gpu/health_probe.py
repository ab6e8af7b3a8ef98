"""A GPU health probe, run after every GPU step: nvidia-smi answers, and a tiny CUDA call
succeeds in a child process (the caller never initialises CUDA itself).

The CUDA call is a kernel launched through libcuda alone (engine.gpu.cuda_driver: a fraction of a
second); only when that fails does a torch child (seconds: torch's import and context) decide,
so a fault in the fast path costs time, never a healthy GPU's queue.

:func:`check`, the worker's per-step probe, asks a resident probe first: a child that keeps its
context, its probe kernel and NVML open (``cuda_driver.py serve``) and answers without a process
start or a context, which is what the fresh processes spend ≈ 0.75 s on while the next step's
verifiers create their contexts (bench/results/2026-12-05-h200-run14). Whatever it cannot answer,
the fresh probe decides."""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine.gpu import cuda_driver
from engine.isolation import processes

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


def probe(device: str = "0", *, timeout: float = float(processes.Timeout.PROBE)) -> Health:
    """Never raises for a sick GPU (that is the result). nvidia-smi and the driver probe run
    side by side: each is a process start and a call into the driver, ≈ 0.36 s of every GPU step
    on the H200 one after the other (bench/results/2026-12-04-h200-run13)."""
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
        smi_run = pool.submit(processes.run, smi_query, timeout=timeout, env=env)
        fast_run = pool.submit(processes.run, driver, timeout=timeout, env=env)
        smi, fast = smi_run.result(), fast_run.result()
    if not smi.ok:
        return Health(False, f"nvidia-smi failed: {(smi.stderr or smi.stdout).strip()[-500:]}")
    if fast.ok:
        return Health(True, smi.stdout.strip(), "driver")
    call = processes.run([sys.executable, "-c", CUDA_CALL], timeout=timeout, env=env)
    if not call.ok:
        why = "timed out" if call.timed_out else call.stderr.strip()[-500:]
        return Health(False, f"CUDA call failed on GPU {device}: {why}", "torch")
    why_not = "timed out" if fast.timed_out else (fast.stderr or fast.stdout).strip()[-200:]
    return Health(True, smi.stdout.strip(), f"torch (the driver probe failed: {why_not})")


class ResidentProbe:
    """``python -I cuda_driver.py serve`` for one GPU: one request line, one answer line. It
    sets itself up while the worker goes on; its first answer waits for that. It ends when its
    stdin closes, with the worker that started it."""

    def __init__(self, device: str, argv: list[str] | None = None) -> None:
        self.device = device
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-I", str(Path(cuda_driver.__file__)), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": device},
        )

    def ask(self, timeout: float) -> Health:
        """Not ok with why when it failed, died or did not answer within ``timeout``; never
        raises."""
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None
        assert stdout is not None
        try:
            stdin.write("probe\n")
            stdin.flush()
        except OSError as exc:
            return Health(False, f"the resident probe is gone ({exc})", "resident")
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                why = f"the resident probe did not answer in {timeout:g} s"
                return Health(False, why, "resident")
        answer = stdout.readline().strip()
        if answer.startswith("ok "):
            return Health(True, answer[3:], "resident")
        why = answer.removeprefix("error ") or f"the resident probe exited ({self.proc.poll()})"
        return Health(False, why, "resident")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a request still buffered for a dead child
                    pipe.close()


_resident: ResidentProbe | None = None  # this process's, for the GPU it probed last


def check(
    device: str = "0", *, fresh: bool = False, timeout: float = float(processes.Timeout.PROBE)
) -> Health:
    """The per-step probe: the resident probe's answer when it is healthy, else :func:`probe`'s
    (fresh processes), which decides. ``fresh``: :func:`probe` alone (after a step that timed
    out or crashed, a new context must work too). A healthy fresh probe through libcuda starts
    a resident one for the next check."""
    global _resident
    doubt = ""
    if _resident is not None and (fresh or _resident.device != device):
        resident_close()
    if _resident is not None:
        started = time.perf_counter()
        answer = _resident.ask(timeout)
        if answer.ok:
            return answer
        doubt = f"; the resident probe failed after {time.perf_counter() - started:.1f} s: "
        doubt += answer.message[-200:]
        resident_close()
    health = probe(device, timeout=timeout)
    if health.ok and health.call == "driver" and not fresh and not doubt:
        _resident = ResidentProbe(device)
    return Health(health.ok, health.message, health.call + doubt) if doubt else health


def resident_close() -> None:
    """Ends this process's resident probe, if any (at exit, and in tests)."""
    global _resident
    resident, _resident = _resident, None
    if resident is not None:
        resident.close()


atexit.register(resident_close)


def _have(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None
