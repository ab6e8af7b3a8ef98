"""Engine configuration from ENGINE_* environment variables (never from Django settings).

Every ENGINE_* variable is read here and nowhere else: switches as bools or enums, paths as
Paths. Code that writes one for a child process takes its name from the constants below.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

CACHE_DIR_VARIABLE = "ENGINE_CACHE_DIR"
NVCC_VARIABLE = "ENGINE_NVCC"
COMPILE_JOBS_VARIABLE = "ENGINE_COMPILE_JOBS"
CUTLASS_INCLUDE_VARIABLE = "ENGINE_CUTLASS_INCLUDE"
CUBLAS_HOME_VARIABLE = "ENGINE_CUBLAS_HOME"
COMPUTE_SANITIZER_VARIABLE = "ENGINE_COMPUTE_SANITIZER"
NVCC_MEMORY_GB_VARIABLE = "ENGINE_NVCC_MEMORY_GB"
NVCC_CPU_SECONDS_VARIABLE = "ENGINE_NVCC_CPU_SECONDS"
CHILD_MEMORY_GB_VARIABLE = "ENGINE_CHILD_MEMORY_GB"
CHILD_FILE_SIZE_MB_VARIABLE = "ENGINE_CHILD_FILE_SIZE_MB"
SANDBOX_NETWORK_VARIABLE = "ENGINE_SANDBOX_NETWORK"
VERIFY_FORK_SERVER_VARIABLE = "ENGINE_VERIFY_FORK_SERVER"
VERIFY_BUSY_STREAM_VARIABLE = "ENGINE_VERIFY_BUSY_STREAM"
VERIFY_MPS_VARIABLE = "ENGINE_VERIFY_MPS"
VERIFY_WARM_VARIABLE = "ENGINE_VERIFY_WARM"
HEAT_WHILE_VERIFYING_VARIABLE = "ENGINE_HEAT_WHILE_VERIFYING"
# Set by the process that started an MPS daemon for verification (engine.gpu.mps), and inherited
# by its children: the daemon's pipe folder, or why none could be started.
VERIFY_MPS_PIPE_VARIABLE = "ENGINE_VERIFY_MPS_PIPE"
VERIFY_MPS_UNAVAILABLE_VARIABLE = "ENGINE_VERIFY_MPS_UNAVAILABLE"

_TRUE = ("on", "1", "true", "yes")
_FALSE = ("off", "0", "false", "no")


class SandboxNetwork(StrEnum):
    AUTO = "auto"  # a network namespace of its own where the OS allows
    OFF = "off"  # never


class VerifyBusyStream(StrEnum):
    GATE = "gate"  # held by a gate the host opens (engine.verify.gpu_checks.StreamGate)
    SLEEP = "sleep"  # a ~10 ms sleep kernel in front, which occupies the GPU


class VerifyWarm(StrEnum):
    OFF = "off"  # each verification child forked when its candidate is known
    ON = "on"  # forked, with a CUDA context, while the GPU times the batch before
    KERNELS = "kernels"  # also runs the checks' kernels once on a tiny problem


Choice = TypeVar("Choice", bound=StrEnum)


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def _env_optional_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None


def _env_switch(name: str, default: bool) -> bool:
    """An on/off switch; also 1/0, true/false, yes/no, in any case."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    accepted = ", ".join(f"{on}/{off}" for on, off in zip(_TRUE, _FALSE, strict=True))
    raise ValueError(f"{name} must be one of {accepted}, got {os.environ[name]!r}")


def _env_choice(name: str, default: Choice) -> Choice:
    value = os.environ.get(name) or default.value
    try:
        return type(default)(value)
    except ValueError:
        choices = ", ".join(member.value for member in type(default))
        raise ValueError(f"{name} must be one of {choices}, got {value!r}") from None


def switch_value(on: bool) -> str:
    """How a switch is written for a child process (or a record): "on" or "off"."""
    return "on" if on else "off"


def verify_mps_pipe() -> str | None:
    """The pipe folder of the MPS daemon that serves verification children, if one runs."""
    return os.environ.get(VERIFY_MPS_PIPE_VARIABLE) or None


def verify_mps_unavailable() -> str | None:
    """Why this process or its parent could not start an MPS daemon, if it tried."""
    return os.environ.get(VERIFY_MPS_UNAVAILABLE_VARIABLE) or None


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "gemmforge" if xdg else Path.home() / ".cache" / "gemmforge"


@dataclass(frozen=True)
class EngineConfig:
    cache_dir: Path = field(
        default_factory=lambda: _env_path(CACHE_DIR_VARIABLE, default_cache_dir())
    )
    nvcc: str = field(default_factory=lambda: os.environ.get(NVCC_VARIABLE, "nvcc"))
    compile_jobs: int = field(
        default_factory=lambda: _env_int(COMPILE_JOBS_VARIABLE, max(1, os.cpu_count() or 1))
    )
    # Where the toolchain's parts are when they are not where they are looked for by default
    # (engine.compilation.compile, engine.timing.baselines, engine.verify.sanitize).
    cutlass_include: Path | None = field(
        default_factory=lambda: _env_optional_path(CUTLASS_INCLUDE_VARIABLE)
    )
    cublas_home: Path | None = field(
        default_factory=lambda: _env_optional_path(CUBLAS_HOME_VARIABLE)
    )
    compute_sanitizer: Path | None = field(
        default_factory=lambda: _env_optional_path(COMPUTE_SANITIZER_VARIABLE)
    )
    # The candidate sandbox (engine.isolation.sandbox): limits for nvcc and for the GPU children
    # that load candidates, and whether they get a network namespace of their own where the OS
    # allows.
    nvcc_memory_gb: int = field(default_factory=lambda: _env_int(NVCC_MEMORY_GB_VARIABLE, 16))
    nvcc_cpu_seconds: int = field(default_factory=lambda: _env_int(NVCC_CPU_SECONDS_VARIABLE, 600))
    child_memory_gb: int = field(default_factory=lambda: _env_int(CHILD_MEMORY_GB_VARIABLE, 32))
    child_file_size_mb: int = field(
        default_factory=lambda: _env_int(CHILD_FILE_SIZE_MB_VARIABLE, 512)
    )
    sandbox_network: SandboxNetwork = field(
        default_factory=lambda: _env_choice(SANDBOX_NETWORK_VARIABLE, SandboxNetwork.AUTO)
    )
    # A batch's verification children forked from one server that imported torch once
    # (engine.isolation.forkserver), or each started fresh (False).
    verify_fork_server: bool = field(
        default_factory=lambda: _env_switch(VERIFY_FORK_SERVER_VARIABLE, True)
    )
    # How a verifier keeps the caller's stream busy while it writes a call's inputs: held by a
    # gate the host opens after the call returns (engine.verify.gpu_checks.StreamGate), or a ~10 ms
    # sleep kernel in front (SLEEP, which occupies the GPU).
    verify_busy_stream: VerifyBusyStream = field(
        default_factory=lambda: _env_choice(VERIFY_BUSY_STREAM_VARIABLE, VerifyBusyStream.GATE)
    )

    # Verification children as clients of an MPS server of our own (engine.gpu.mps), so that many
    # run on the GPU at once instead of taking turns; False: each its own context.
    verify_mps: bool = field(default_factory=lambda: _env_switch(VERIFY_MPS_VARIABLE, False))

    # Warm verifiers (engine.verify.verifier.WarmPool): the next batch's verification children are
    # forked, and create their CUDA contexts, while the GPU times the batch before; each still
    # verifies one candidate. KERNELS: they also run the checks' kernels once on a tiny problem
    # (each kernel's first use in a process is most of a lone verifier's first trial), which puts
    # small kernels beside that timing. OFF: each child is forked when its candidate is known.
    verify_warm: VerifyWarm = field(
        default_factory=lambda: _env_choice(VERIFY_WARM_VARIABLE, VerifyWarm.OFF)
    )

    # The heat-up the timing needs (Bench.heat_up), run on the baselines while this batch's
    # verifiers work instead of after their verdicts, so that it costs the step no time of its
    # own. Only baselines run then: a candidate runs in the measuring process once verified.
    # False: the heat-up runs after the verdicts, as its own phase.
    heat_while_verifying: bool = field(
        default_factory=lambda: _env_switch(HEAT_WHILE_VERIFYING_VARIABLE, False)
    )

    @property
    def kernel_cache(self) -> Path:
        return self.cache_dir / "kernels"

    @property
    def baseline_cache(self) -> Path:
        return self.cache_dir / "baselines"


def load() -> EngineConfig:
    return EngineConfig()
