"""The CUDA toolkit and libraries the engine builds against, found and versioned in one place.

Where nvcc, the CUTLASS/CuTe headers, cuBLAS, compute-sanitizer and the CUDA runtime library are,
and which versions they are: what the compile cache keys on and what every recorded number's
environment names. ``ENGINE_*`` overrides come through engine.config.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from engine.config import (
    CUBLAS_HOME_VARIABLE,
    CUTLASS_INCLUDE_VARIABLE,
    NVCC_VARIABLE,
    EngineConfig,
)
from engine.config import load as load_config
from engine.isolation import processes


class CompileSetupError(RuntimeError):
    """The toolchain cannot run at all (no nvcc, no CUTLASS headers): fix the environment."""


_NVCC_VERSION_RE = re.compile(r"release [0-9.]+, V([0-9.]+)")
_TOP_RE = re.compile(r"^#\$ TOP=(.+)$", re.MULTILINE)  # the toolkit root nvcc --dryrun prints


def cutlass_include_dir(config: EngineConfig | None = None) -> Path:
    """The CUTLASS/CuTe C++ include folder of the installed ``nvidia-cutlass`` package.

    ``ENGINE_CUTLASS_INCLUDE`` overrides it. Raises :class:`CompileSetupError` when neither gives
    a folder holding ``cutlass/cutlass.h``. The package is located, never imported.
    """
    if (path := (config or load_config()).cutlass_include) is not None:
        if not (path / "cutlass" / "cutlass.h").is_file():
            raise CompileSetupError(
                f"{CUTLASS_INCLUDE_VARIABLE}={str(path)!r} does not contain cutlass/cutlass.h"
            )
        return path
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise CompileSetupError(
            "CUTLASS headers not found: install nvidia-cutlass (pip install nvidia-cutlass) "
            f"or set {CUTLASS_INCLUDE_VARIABLE} to a folder containing cutlass/cutlass.h"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "source" / "include"
        if (path / "cutlass" / "cutlass.h").is_file():
            return path
    raise CompileSetupError(
        "the installed cutlass_library package has no source/include/cutlass/cutlass.h; "
        f"set {CUTLASS_INCLUDE_VARIABLE} to a CUTLASS include folder"
    )


@functools.cache
def nvcc_version(nvcc: str = "nvcc") -> str:
    """nvcc's full version, e.g. ``"13.0.88"``. Raises :class:`CompileSetupError` without nvcc."""
    try:
        result = processes.run([nvcc, "--version"], timeout=processes.Timeout.PROBE)
    except OSError as exc:
        raise CompileSetupError(f"cannot run {nvcc!r}: {exc}; set {NVCC_VARIABLE}") from exc
    match = _NVCC_VERSION_RE.search(result.stdout)
    if not result.ok or match is None:
        raise CompileSetupError(f"{nvcc} --version failed: {result.stderr or result.stdout}")
    return match.group(1)


@functools.cache
def cutlass_version(include_dir: Path | None = None) -> str:
    """``"MAJOR.MINOR.PATCH"`` read from ``cutlass/version.h``."""
    header = (include_dir or cutlass_include_dir()) / "cutlass" / "version.h"
    text = header.read_text(errors="replace")
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#define\s+CUTLASS_{part}\s+([0-9]+)", text)
        if match is None:
            raise CompileSetupError(f"{header} does not define CUTLASS_{part}")
        parts.append(match.group(1))
    return ".".join(parts)


@functools.cache
def triton_version() -> str:
    """The installed Triton's version (not imported). Raises :class:`CompileSetupError` when
    Triton is not installed: only Triton sources need it."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        raise CompileSetupError(
            "a Triton kernel needs Triton to build: pip install triton (see requirements.txt)"
        ) from None


class CublasNotFound(RuntimeError):
    """No cuBLAS headers and libraries were found (CUDA toolkit or the nvidia-cublas wheel)."""


@dataclass(frozen=True)
class CublasPaths:
    include_dir: Path
    lib_dir: Path
    libraries: tuple[str, ...]  # as -l arguments


def find_cublas(config: EngineConfig | None = None) -> CublasPaths:
    """cuBLAS from ENGINE_CUBLAS_HOME, the CUDA toolkit, or the pip nvidia-cublas package."""
    candidates: list[Path] = []
    if home := (config or load_config()).cublas_home:
        candidates.append(home)
    candidates += [Path("/usr/local/cuda"), Path("/usr/local/cuda/targets/x86_64-linux")]
    spec = importlib.util.find_spec("nvidia")
    for location in spec.submodule_search_locations or [] if spec else []:
        candidates += [Path(location) / "cu13", Path(location) / "cublas"]
    for root in candidates:
        if not (root / "include" / "cublasLt.h").exists():
            continue
        for lib_dir in (root / "lib64", root / "lib"):
            for suffix in (".so", ".so.13", ".so.12"):
                if (lib_dir / f"libcublasLt{suffix}").exists():
                    libs = (f":libcublasLt{suffix}", f":libcublas{suffix}")
                    return CublasPaths(root / "include", lib_dir, libs)
    raise CublasNotFound(
        "cuBLAS not found: install the CUDA toolkit's cuBLAS or the nvidia-cublas wheel, "
        f"or set {CUBLAS_HOME_VARIABLE} to a folder with include/cublasLt.h and lib/libcublasLt.so*"
    )


def compute_sanitizer_path(config: EngineConfig | None = None) -> Path | None:
    """``ENGINE_COMPUTE_SANITIZER``, else compute-sanitizer on PATH, else beside nvcc; None
    when there is none."""
    config = config or load_config()
    candidates = [str(config.compute_sanitizer)] if config.compute_sanitizer else []
    candidates.append(shutil.which("compute-sanitizer"))
    nvcc = shutil.which(config.nvcc)
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent / "compute-sanitizer"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@functools.cache
def cuda_library_dir(nvcc: str = "nvcc") -> Path | None:
    """The folder holding the libcudart.so of the toolkit that ``nvcc`` belongs to, or None.

    ``nvcc`` may be a wrapper script, so the toolkit root is asked of nvcc itself (``--dryrun``
    prints ``TOP=``); CUDA_HOME, the folder above nvcc and /usr/local/cuda are fallbacks.
    """
    roots: list[Path] = []
    try:
        probe = processes.run(
            [nvcc, "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
            timeout=processes.Timeout.PROBE,
        )
        roots += [Path(m.strip()) for m in _TOP_RE.findall(probe.stdout + probe.stderr)]
    except OSError:
        pass
    roots += [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    if found := shutil.which(nvcc):
        roots.append(Path(found).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        for folder in (root / "lib64", root / "targets" / "x86_64-linux" / "lib", root / "lib"):
            if any(folder.glob("libcudart.so*")):
                return folder.resolve()
    return None
