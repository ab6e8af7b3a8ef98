"""The GPU environment recorded with every number: GPU, driver, CUDA, cuBLAS, CUTLASS, clocks."""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import shutil
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.compilation.toolkit import cutlass_version, nvcc_version
from engine.isolation import processes

_SMI_FIELDS = (
    "driver_version",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
    "power.limit",
)


@dataclass(frozen=True)
class GpuEnvironment:
    gpu_name: str
    arch: str  # e.g. sm_90
    sm_count: int
    driver: str
    cuda_runtime: str
    cublaslt_version: str
    cutlass_version: str
    torch_version: str
    nvcc_version: str
    hostname: str
    python: str
    recorded_at: str
    clocks: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Identifies everything a cached baseline result depends on."""
        parts = (self.gpu_name, self.driver, self.cuda_runtime, self.cublaslt_version)
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["key"] = self.key
        return data


def nvidia_smi() -> dict[str, str]:
    """Current driver, clocks, temperature and power, or {} where nvidia-smi is missing."""
    if shutil.which("nvidia-smi") is None:
        return {}
    result = processes.run(
        ["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
        timeout=processes.Timeout.PROBE,
    )
    if not result.ok:
        return {}
    values = [v.strip() for v in result.stdout.splitlines()[0].split(",")]
    return dict(zip(_SMI_FIELDS, values, strict=False))


def gpu_model(index: int = 0) -> str | None:
    """The GPU's name as nvidia-smi (and torch) give it, e.g. "NVIDIA H100 80GB HBM3"; None
    where nvidia-smi is missing or fails. Asks no CUDA context of this process."""
    if shutil.which("nvidia-smi") is None:
        return None
    result = processes.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", f"--id={index}"],
        timeout=processes.Timeout.PROBE,
    )
    lines = result.stdout.splitlines() if result.ok else []
    return lines[0].strip() if lines and lines[0].strip() else None


def collect(*, cublaslt_version: int | None = None) -> GpuEnvironment:
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = nvidia_smi()
    try:
        cutlass = cutlass_version()
    except Exception as exc:  # headers are optional for timing baselines
        cutlass = f"unavailable ({exc})"
    try:
        nvcc = nvcc_version()
    except Exception:
        nvcc = "unavailable"
    return GpuEnvironment(
        gpu_name=props.name,
        arch=f"sm_{props.major}{props.minor}",
        sm_count=props.multi_processor_count,
        driver=smi.get("driver_version", "unknown"),
        cuda_runtime=str(torch.version.cuda),
        cublaslt_version=str(cublaslt_version) if cublaslt_version else "unknown",
        cutlass_version=cutlass,
        torch_version=torch.__version__,
        nvcc_version=nvcc,
        hostname=socket.gethostname(),
        python=platform.python_version(),
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        clocks={k: v for k, v in smi.items() if k != "driver_version"},
    )
