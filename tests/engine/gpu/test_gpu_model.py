"""The GPU model a campaign's finals are resumed on, read from nvidia-smi without CUDA."""

from __future__ import annotations

import os
from pathlib import Path

from engine.gpu import environment


def fake_smi(folder: Path, body: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_it_reads_the_gpu_name_from_nvidia_smi(tmp_path, monkeypatch):
    fake_smi(tmp_path, 'echo "NVIDIA H100 80GB HBM3"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert environment.gpu_model() == "NVIDIA H100 80GB HBM3"


def test_a_failing_or_missing_nvidia_smi_names_no_gpu(tmp_path, monkeypatch):
    fake_smi(tmp_path, "echo 'No devices were found' >&2; exit 6")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert environment.gpu_model() is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert environment.gpu_model() is None
