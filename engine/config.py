"""Engine configuration from ENGINE_* environment variables (never from Django settings)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name) or default
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "gemmforge" if xdg else Path.home() / ".cache" / "gemmforge"


@dataclass(frozen=True)
class EngineConfig:
    cache_dir: Path = field(
        default_factory=lambda: _env_path("ENGINE_CACHE_DIR", default_cache_dir())
    )
    nvcc: str = field(default_factory=lambda: os.environ.get("ENGINE_NVCC", "nvcc"))
    compile_jobs: int = field(
        default_factory=lambda: _env_int("ENGINE_COMPILE_JOBS", max(1, os.cpu_count() or 1))
    )
    # The candidate sandbox (engine.isolation.sandbox): limits for nvcc and for the GPU children
    # that load candidates, and whether they get a network namespace of their own where the OS
    # allows.
    nvcc_memory_gb: int = field(default_factory=lambda: _env_int("ENGINE_NVCC_MEMORY_GB", 16))
    nvcc_cpu_seconds: int = field(default_factory=lambda: _env_int("ENGINE_NVCC_CPU_SECONDS", 600))
    child_memory_gb: int = field(default_factory=lambda: _env_int("ENGINE_CHILD_MEMORY_GB", 32))
    child_file_size_mb: int = field(
        default_factory=lambda: _env_int("ENGINE_CHILD_FILE_SIZE_MB", 512)
    )
    sandbox_network: str = field(
        default_factory=lambda: _env_choice("ENGINE_SANDBOX_NETWORK", "auto", ("auto", "off"))
    )
    # A batch's verification children forked from one server that imported torch once
    # (engine.isolation.forkserver), or each started fresh ("off").
    verify_fork_server: str = field(
        default_factory=lambda: _env_choice("ENGINE_VERIFY_FORK_SERVER", "on", ("on", "off"))
    )
    # How a verifier keeps the caller's stream busy while it writes a call's inputs: held by a
    # gate the host opens after the call returns (engine.verify.gpu_checks.StreamGate), or a ~10 ms
    # sleep kernel in front ("sleep", which occupies the GPU).
    verify_busy_stream: str = field(
        default_factory=lambda: _env_choice("ENGINE_VERIFY_BUSY_STREAM", "gate", ("gate", "sleep"))
    )

    # Verification children as clients of an MPS server of our own (engine.gpu.mps), so that many
    # run on the GPU at once instead of taking turns; "off": each its own context.
    verify_mps: str = field(
        default_factory=lambda: _env_choice("ENGINE_VERIFY_MPS", "off", ("off", "on"))
    )

    # Warm verifiers (engine.verify.verifier.WarmPool): the next batch's verification children are
    # forked, and create their CUDA contexts, while the GPU times the batch before; each still
    # verifies one candidate. "kernels": they also run the checks' kernels once on a tiny problem
    # (each kernel's first use in a process is most of a lone verifier's first trial), which puts
    # small kernels beside that timing. "off": each child is forked when its candidate is known.
    verify_warm: str = field(
        default_factory=lambda: _env_choice("ENGINE_VERIFY_WARM", "off", ("off", "on", "kernels"))
    )

    # The heat-up the timing needs (Bench.heat_up), run on the baselines while this batch's
    # verifiers work instead of after their verdicts, so that it costs the step no time of its
    # own. Only baselines run then: a candidate runs in the measuring process once verified.
    # "off": the heat-up runs after the verdicts, as its own phase.
    heat_while_verifying: str = field(
        default_factory=lambda: _env_choice("ENGINE_HEAT_WHILE_VERIFYING", "off", ("off", "on"))
    )

    @property
    def kernel_cache(self) -> Path:
        return self.cache_dir / "kernels"

    @property
    def baseline_cache(self) -> Path:
        return self.cache_dir / "baselines"


def load() -> EngineConfig:
    return EngineConfig()
