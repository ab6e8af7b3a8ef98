"""Compile-cache entries as artifacts (engine.compilation.cache_entries): packed on one machine,
checked and installed whole into another machine's cache; the keys a GPU step needs, without
compiling."""

from __future__ import annotations

import json
import os

import pytest

from engine.codegen.library import library
from engine.compilation import cache_entries
from engine.compilation import compile as comp
from engine.problem import Layout
from tests.engine.compile_fakes import fake_nvcc, machine, tar_members, tar_of


@pytest.fixture
def nvcc(tmp_path):
    return fake_nvcc(tmp_path)


@pytest.fixture
def built(tmp_path, nvcc):
    """One successful entry in the cache of machine ``a``: (its config, its key)."""
    config = machine(tmp_path / "a", nvcc)
    [result] = comp.compile_configs(library("sm90", Layout.NN, limit=1), config=config)
    assert result.ok, result.log
    return config, result.key


def leftovers(config, key) -> list[str]:
    folder = comp.entry_dir(key, config).parent
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def test_the_keys_of_a_batch_are_the_keys_its_compile_builds(tmp_path, nvcc):
    config = machine(tmp_path, nvcc)
    configs = [*library("sm90", Layout.NN, limit=2), *library("sm80", Layout.NN, limit=2)]
    for arch in ("sm_90", "sm_80"):
        built = comp.compile_configs(configs, config=config, target_arch=arch)
        assert comp.config_keys(configs, config=config, target_arch=arch) == [r.key for r in built]
    # sm80 kernels build for the GPU's arch only: other keys on another GPU
    sm80 = configs[2:]
    assert comp.config_keys(sm80, config=config, target_arch="sm_90") != comp.config_keys(
        sm80, config=config, target_arch="sm_80"
    )


def test_a_packed_entry_installs_into_another_machines_cache(tmp_path, built):
    a, key = built
    b = machine(tmp_path / "b", a.nvcc)
    data = cache_entries.pack_entry(key, a)
    assert set(tar_members(data)) == {
        "artifact.json",
        "kernel.cu",
        "lib.so",
        "result.json",
        "build.log",
    }
    assert comp.try_load(key, b) is None
    assert cache_entries.install_entry(key, data, b) == cache_entries.Installed(key, "installed")
    there, here = comp.try_load(key, a), comp.try_load(key, b)
    assert here is not None
    assert (here.ok, here.cached) == (True, True)
    assert here.library.read_bytes() == there.library.read_bytes()
    assert os.access(here.library, os.X_OK)
    assert (here.log, here.resources, here.command) == (there.log, there.resources, there.command)
    assert cache_entries.install_entry(key, data, b).status == "present"


def test_a_failed_build_is_not_packed(tmp_path):
    config = machine(tmp_path, fake_nvcc(tmp_path, fails=True))
    [result] = comp.compile_configs(library("sm90", Layout.NN, limit=1), config=config)
    assert not result.ok
    assert comp.try_load(result.key, config) is not None  # failures are cached, not published
    assert cache_entries.pack_entry(result.key, config) == b""
    assert cache_entries.pack_entry("f" * 64, config) == b""


def test_a_corrupted_library_is_refused(tmp_path, built):
    a, key = built
    b = machine(tmp_path / "b", a.nvcc)
    files = tar_members(cache_entries.pack_entry(key, a))
    files["lib.so"] = files["lib.so"][:-1] + b"!"
    installed = cache_entries.install_entry(key, tar_of(files), b)
    assert installed.status == "refused"
    assert "lib.so: sha256 differs" in installed.reason
    assert comp.try_load(key, b) is None
    assert not comp.entry_dir(key, b).exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f, m: f.update({"../evil.so": b"x"}), "unexpected member"),
        (lambda f, m: f.pop("lib.so"), "do not match the manifest"),
        (lambda f, m: m.update(key="0" * 64), "is for key"),
        (lambda f, m: m.update(abi_header_sha256="0" * 64), "another gemmforge_abi.h"),
        (lambda f, m: f.pop("artifact.json"), "no usable manifest"),
    ],
)
def test_an_artifact_that_fails_a_check_installs_nothing(tmp_path, built, change, reason):
    a, key = built
    b = machine(tmp_path / "b", a.nvcc)
    files = tar_members(cache_entries.pack_entry(key, a))
    manifest = json.loads(files["artifact.json"])
    change(files, manifest)
    if "artifact.json" in files:
        files["artifact.json"] = json.dumps(manifest).encode()
    installed = cache_entries.install_entry(key, tar_of(files), b)
    assert installed.status == "refused"
    assert reason in installed.reason
    assert comp.try_load(key, b) is None


def test_a_truncated_artifact_is_refused(tmp_path, built):
    a, key = built
    data = cache_entries.pack_entry(key, a)
    installed = cache_entries.install_entry(
        key, data[: len(data) // 2], machine(tmp_path / "b", a.nvcc)
    )
    assert installed.status == "refused"


def test_a_result_that_is_not_this_keys_success_is_refused(tmp_path, built):
    a, key = built
    files = tar_members(cache_entries.pack_entry(key, a, compress_level=0))
    manifest = json.loads(files["artifact.json"])
    files["kernel.cu"] = b"// another source\n"
    manifest["files"]["kernel.cu"]["sha256"] = cache_entries.sha256(files["kernel.cu"])
    files["artifact.json"] = json.dumps(manifest).encode()
    installed = cache_entries.install_entry(key, tar_of(files), machine(tmp_path / "b", a.nvcc))
    assert (installed.status, installed.reason) == (
        "refused",
        "kernel.cu is not the source result.json was built from",
    )


def test_an_entry_is_installed_whole_or_not_at_all(tmp_path, built, monkeypatch):
    a, key = built
    b = machine(tmp_path / "b", a.nvcc)
    data = cache_entries.pack_entry(key, a)
    written: list[str] = []
    real_write = cache_entries.Path.write_bytes

    def write_then_crash(path, content):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(path.name)
        return real_write(path, content)

    monkeypatch.setattr(cache_entries.Path, "write_bytes", write_then_crash)
    with pytest.raises(OSError, match="No space left"):
        cache_entries.install_entry(key, data, b)
    assert comp.try_load(key, b) is None
    assert leftovers(b, key) == []  # neither the entry nor its temporary folder
    monkeypatch.undo()
    assert cache_entries.install_entry(key, data, b).status == "installed"
    assert leftovers(b, key) == [key]
    assert comp.try_load(key, b).ok
