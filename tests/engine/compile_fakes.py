"""A stand-in nvcc that "builds" without CUDA: the compile cache gets real entries in its layout."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from engine.config import EngineConfig

NVCC_VERSION = "13.0.88"


def fake_nvcc(folder: Path, *, fails: bool = False) -> Path:
    """An executable that answers ``--version`` like nvcc 13.0 and otherwise writes ``lib.so``
    (the source's bytes) in its working folder, or reports an error when ``fails``."""
    script = folder / ("fake-nvcc-fails" if fails else "fake-nvcc")
    build = (
        'echo "kernel.cu(1): error: fake failure" >&2; exit 1'
        if fails
        else 'cat kernel.cu > lib.so; echo "ptxas info    : fake build"; exit 0'
    )
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then '
        f'echo "Cuda compilation tools, release 13.0, V{NVCC_VERSION}"; exit 0; fi\n'
        f"{build}\n"
    )
    script.chmod(0o755)
    return script


def machine(folder: Path, nvcc: Path | str) -> EngineConfig:
    """The engine configuration of one machine: its own compile cache, the given nvcc."""
    return EngineConfig(cache_dir=folder / "cache", nvcc=str(nvcc), compile_jobs=2)


def tar_members(data: bytes) -> dict[str, bytes]:
    """The files of a (gzip'd or plain) tar, by name: an artifact's insides."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def tar_of(files: dict[str, bytes]) -> bytes:
    """A plain tar of ``files``: an artifact put together by hand."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
