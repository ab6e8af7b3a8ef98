"""Shared pytest fixtures and hardware gates (markers: gpu, nvcc)."""

from __future__ import annotations

import shutil

import pytest


def _have_nvcc() -> bool:
    import os

    return shutil.which(os.environ.get("ENGINE_NVCC", "nvcc")) is not None


requires_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="needs nvcc on PATH")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``nvcc`` are skipped where nvcc is missing."""
    if _have_nvcc():
        return
    skip = pytest.mark.skip(reason="needs nvcc on PATH")
    for item in items:
        if "nvcc" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def engine_config(tmp_path, monkeypatch):
    """An EngineConfig whose cache lives in a fresh temporary folder."""
    from engine.config import EngineConfig

    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    return EngineConfig(cache_dir=tmp_path / "cache")


def _have_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``gpu`` are skipped where no CUDA GPU is visible."""
    if "gpu" in item.keywords and not _have_cuda():
        pytest.skip("needs a CUDA GPU")
