"""The artifact store: a compile step publishes what it built, a GPU step on another
machine fetches its batch into its own compile cache before its child starts. Two "machines" are
two engine caches (ENGINE_CACHE_DIR) with a stand-in nvcc; the store is a folder (tmp_path)."""

from __future__ import annotations

import gzip
import logging
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from engine.codegen.library import library
from engine.compilation import compile as comp
from engine.gpu import health_probe
from engine.problem import Layout
from engine.problem import Problem as EngineProblem
from tests.engine.compile_fakes import fake_nvcc, tar_members, tar_of
from webapp.campaigns import artifact_store, runner, work
from webapp.campaigns.models import Campaign, Candidate, WorkItem
from webapp.campaigns.services import campaign_create

SETTINGS = Path(__file__).resolve().parents[2] / "webapp" / "settings.py"
FS_STORAGE = "django.core.files.storage.FileSystemStorage"


@pytest.fixture
def store(settings, tmp_path) -> Path:
    """The artifact store: a folder of this test's; the local executor."""
    folder = tmp_path / "store"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": FS_STORAGE, "OPTIONS": {"location": str(folder)}},
    }
    settings.GEMMFORGE_EXECUTOR = "local"
    return folder


class Machines:
    """Switches this process between a CPU compile host and a GPU host (engine caches)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.nvcc = {False: fake_nvcc(tmp_path), True: fake_nvcc(tmp_path, fails=True)}

    def use(self, name: str, *, nvcc_fails: bool = False) -> Path:
        """Become machine ``name`` ("cpu" or "gpu"): its own cache; its nvcc builds, or fails
        on every source (the same nvcc version either way, so the same keys)."""
        cache = self.tmp_path / f"{name}-cache"
        self.monkeypatch.setenv("ENGINE_CACHE_DIR", str(cache))
        self.monkeypatch.setenv("ENGINE_NVCC", str(self.nvcc[nvcc_fails]))
        return cache


@pytest.fixture
def machines(tmp_path, monkeypatch) -> Machines:
    return Machines(tmp_path, monkeypatch)


@pytest.fixture
def configs():
    return library("sm90", Layout.TN, limit=2)


@pytest.fixture
def gpu_item(alice, configs):
    """A running campaign's GPU step of ``configs`` (compiled, on a 4096³ TN shape), claimed."""
    campaign = campaign_create(
        owner=alice,
        name="artifacts",
        layout="tn",
        problems=[EngineProblem.parse("4096x4096x4096", "tn")],
        budget_per_shape=4,
        proposer_mix={"random": 1.0},
    )
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    problem = campaign.problems.get()
    ids = [
        Candidate.objects.create(
            problem=problem,
            name=config.name,
            family=config.FAMILY,
            config=config.knobs(),
            source=config.render(),
            source_hash=comp.source_hash(config.render()),
            proposer="random",
            status=Candidate.Status.COMPILED,
            compile_status=Candidate.CompileStatus.OK,
        ).id
        for config in configs
    ]
    item = work.work_item_create(
        problem=problem, kind=WorkItem.Kind.GPU, round=0, payload={"candidates": ids}
    )
    return item, work.work_item_claim(item_id=item.id, hostname="gpu0@test")


@pytest.fixture
def gpu_child(monkeypatch, configs):
    """Stands in for the GPU step's child: looks its batch up in the compile cache as
    engine.execution.gpu_step does (compile_configs for the GPU's arch), and keeps what it got."""
    seen: list[comp.CompileResult] = []

    def child(problem_key, rows, *, phases=None, protocol="device"):
        seen.extend(comp.compile_configs(configs, target_arch="sm_90"))
        return [
            {
                "name": r.name,
                "status": "ok",
                "seconds": 1e-4,
                "baselines": {"cublaslt_autotune": 2e-4},
            }
            for r in rows
        ]

    monkeypatch.setattr(runner, "run_gpu_child", child)
    monkeypatch.setattr(
        health_probe, "check", lambda device, fresh=False: health_probe.Health(True, "H200", "x")
    )
    return seen


def stored(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def test_a_build_published_by_a_compile_worker_is_installed_for_the_gpu_step(
    store, machines, configs, gpu_item, gpu_child
):
    machines.use("cpu")
    assert runner.compile_batch(configs, arch="sm_90") == {}
    keys = comp.config_keys(configs, target_arch="sm_90")
    assert stored(store) == sorted(f"{key}.tar.gz" for key in keys)
    machines.use("gpu", nvcc_fails=True)  # the GPU host could not build them itself
    item, token = gpu_item
    result = runner.gpu_step(item_id=item.id, token=token)
    assert [(r.ok, r.cached, r.key) for r in gpu_child] == [(True, True, key) for key in keys]
    assert result["ok"] == 2
    assert result["info"]["artifacts"] == {"installed": 2}
    assert result["phases_s"]["artifact_fetch"] > 0
    assert next(iter(result["phases_s"])) == "artifact_fetch"


def test_a_missing_artifact_leaves_the_compile_to_the_gpu_step(
    store, machines, configs, gpu_item, gpu_child
):
    machines.use("gpu")
    item, token = gpu_item
    result = runner.gpu_step(item_id=item.id, token=token)
    assert [(r.ok, r.cached) for r in gpu_child] == [(True, False)] * 2  # built on the GPU host
    assert "artifacts" not in result["info"]
    assert "artifact_fetch" in result["phases_s"]
    assert stored(store) == []
    fetched = artifact_store.artifacts_fetch_batch(
        candidates=[(c.FAMILY, c.knobs()) for c in configs], arch="sm_90"
    )
    assert fetched == {"present": 2}  # the child's builds are local now


def test_a_corrupted_artifact_is_refused(store, machines, configs, caplog):
    machines.use("cpu")
    runner.compile_batch(configs, arch="sm_90")
    key = comp.config_keys(configs, target_arch="sm_90")[0]
    path = store / artifact_store.artifact_name(key)
    files = tar_members(path.read_bytes())
    files["lib.so"] = b"\x7fELF and something else"
    path.write_bytes(gzip.compress(tar_of(files)))
    gpu_cache = machines.use("gpu")
    with caplog.at_level(logging.ERROR, logger="webapp.campaigns.artifact_store"):
        fetched = artifact_store.artifacts_fetch(keys=[key])
    assert fetched == {"refused": 1}
    assert "refused, not installed: lib.so: sha256 differs" in caplog.text
    assert comp.try_load(key, comp.load_config()) is None
    assert not any(gpu_cache.rglob("lib.so"))


def test_publishing_twice_stores_once(store, machines, configs, monkeypatch):
    machines.use("cpu")
    comp.compile_configs(configs, target_arch="sm_90")
    keys = comp.config_keys(configs, target_arch="sm_90")
    assert artifact_store.artifacts_publish(keys=keys) == {"published": 2}
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert artifact_store.artifacts_publish(keys=[*keys, *keys]) == {"present": 2}
    # another worker published between this one's look and its save: its copy is dropped
    storage_class = type(artifact_store.artifact_storage())
    real_exists, looked = storage_class.exists, set()

    def stale_look(self, name):
        if name not in looked:
            looked.add(name)
            return False
        return real_exists(self, name)

    monkeypatch.setattr(storage_class, "exists", stale_look)
    assert artifact_store.artifacts_publish(keys=keys) == {"present": 2}
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


def test_only_successful_builds_are_published(store, machines, configs):
    machines.use("cpu", nvcc_fails=True)
    failures = runner.compile_batch(configs, arch="sm_90")
    assert set(failures) == {c.name for c in configs}
    assert stored(store) == []
    keys = comp.config_keys(configs, target_arch="sm_90")
    assert artifact_store.artifacts_publish(keys=keys) == {"unbuilt": 2}


def test_a_store_that_fails_fails_no_step(store, machines, configs, monkeypatch, caplog):
    def broken(self, name):
        raise OSError("the store is unreachable")

    monkeypatch.setattr(type(artifact_store.artifact_storage()), "exists", broken)
    machines.use("cpu")
    with caplog.at_level(logging.WARNING, logger="webapp.campaigns.artifact_store"):
        assert runner.compile_batch(configs, arch="sm_90") == {}
        machines.use("gpu")
        fetched = artifact_store.artifacts_fetch_batch(
            candidates=[(c.FAMILY, c.knobs()) for c in configs], arch="sm_90"
        )
    assert fetched == {"error": "OSError: the store is unreachable"}
    assert "could not publish" in caplog.text
    assert "could not fetch" in caplog.text


def test_the_store_can_be_turned_off(store, machines, configs, settings):
    settings.GEMMFORGE_ARTIFACT_STORE = False
    machines.use("cpu")
    assert runner.compile_batch(configs, arch="sm_90") == {}
    assert stored(store) == []
    assert artifact_store.artifacts_fetch_batch(candidates=[], arch="sm_90") == {}


def test_the_store_is_a_folder_under_var_unless_configured(monkeypatch):
    for name in ("ARTIFACTS_STORAGE", "ARTIFACTS_STORAGE_OPTIONS", "ARTIFACTS_ROOT"):
        monkeypatch.delenv(name, raising=False)
    loaded = runpy.run_path(str(SETTINGS))
    assert loaded["STORAGES"]["artifacts"] == {
        "BACKEND": FS_STORAGE,
        "OPTIONS": {"location": str(loaded["BASE_DIR"] / "var" / "artifacts")},
    }
    monkeypatch.setenv("ARTIFACTS_ROOT", "/srv/gemmforge/artifacts")
    assert runpy.run_path(str(SETTINGS))["STORAGES"]["artifacts"]["OPTIONS"] == {
        "location": "/srv/gemmforge/artifacts"
    }
    monkeypatch.setenv("ARTIFACTS_STORAGE", "storages.backends.s3.S3Storage")
    monkeypatch.setenv("ARTIFACTS_STORAGE_OPTIONS", '{"bucket_name": "kernels"}')
    assert runpy.run_path(str(SETTINGS))["STORAGES"]["artifacts"] == {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {"bucket_name": "kernels"},
    }
    monkeypatch.setenv("ARTIFACTS_STORAGE_OPTIONS", '["kernels"]')
    with pytest.raises(ImproperlyConfigured, match="ARTIFACTS_STORAGE_OPTIONS must be a JSON"):
        runpy.run_path(str(SETTINGS))
