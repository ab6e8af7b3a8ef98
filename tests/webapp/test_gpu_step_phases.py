"""The GPU step's time breakdown: the runner stores ``phases_s`` (engine.timing.phases)
and ``info`` in the GPU work item's result, from its child's own phases plus what only the worker
sees (the child's start and exit, the health probe, the recording). They add up to the step."""

from __future__ import annotations

import json
import time
from unittest import mock

import pytest

from engine.execution.executor import ReplayTable
from engine.gpu import health_probe
from engine.isolation import processes
from engine.problem import Problem as EngineProblem
from webapp.campaigns import runner, work
from webapp.campaigns.models import Campaign, Candidate, WorkItem
from webapp.campaigns.services import campaign_create

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
SHAPE = "4096x4096x4096"


def campaign_for(owner) -> Campaign:
    return campaign_create(
        owner=owner,
        name="phases",
        layout="tn",
        problems=[EngineProblem.parse(SHAPE, "tn")],
        budget_per_shape=4,
        proposer_mix={"random": 1.0},
    )


@pytest.mark.slow
def test_a_replayed_step_stores_its_phases(alice, settings, django_capture_on_commit_callbacks):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    settings.GEMMFORGE_BATCH_SIZE = 4
    settings.GEMMFORGE_REPLAY_DELAY_MS = 100
    campaign_for(alice)
    with django_capture_on_commit_callbacks(execute=True):
        work.work_requeue()
    gpu = WorkItem.objects.filter(kind="gpu").order_by("round").first()
    phases = gpu.result["phases_s"]
    assert gpu.result["measured"] == len(gpu.payload["candidates"]) > 0
    assert {"child_start", "imports", "timing", "child_exit", "record", "other"} <= set(phases)
    assert phases["timing"] >= 0.1  # the replay's stand-in for the GPU's time
    assert phases["child_start"] > 0  # an interpreter and its imports take time
    assert "health_probe" not in phases  # no GPU to probe in a replay
    assert all(v >= 0 for v in phases.values())


@pytest.fixture
def gpu_item(alice, settings):
    """A running campaign with a GPU step of two compiled candidates, claimed."""
    settings.GEMMFORGE_EXECUTOR = "local"
    campaign = campaign_for(alice)
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    problem = campaign.problems.get()
    table = ReplayTable.load([settings.BASE_DIR / RECORDED_RUN])
    ids = []
    for i, config in enumerate(table.configs_for(problem.as_engine())[:2]):
        ids.append(
            Candidate.objects.create(
                problem=problem,
                name=config.name,
                family=config.FAMILY,
                config=config.knobs(),
                source=f"// k{i}",
                source_hash=f"{i:064d}",
                proposer="random",
                status=Candidate.Status.COMPILED,
                compile_status=Candidate.CompileStatus.OK,
            ).id
        )
    item = work.work_item_create(
        problem=problem, kind=WorkItem.Kind.GPU, round=0, payload={"candidates": ids}
    )
    return item, work.work_item_claim(item_id=item.id, hostname="gpu0@test")


def test_a_local_step_books_the_childs_phases_and_its_own(gpu_item, monkeypatch):
    item, token = gpu_item
    names = list(Candidate.objects.order_by("id").values_list("name", flat=True))

    def child(argv, **_kwargs):
        time.sleep(0.05)  # the interpreter starting
        started_at = time.time()
        time.sleep(0.07)  # the child's own phases, below
        out = argv[argv.index("--out") + 1]
        outcomes = [
            {"name": n, "status": "ok", "seconds": 1e-4, "baselines": {"cublaslt_autotune": 2e-4}}
            for n in names
        ]
        data = {
            "outcomes": outcomes,
            "phases_s": {"setup": 0.01, "verification": 0.02, "timing": 0.03, "other": 0.01},
            "info": {"autotune_cached": True, "verification_children": 2},
            "started_at": started_at,
            "finished_at": time.time(),
        }
        with open(out, "w") as f:
            json.dump(data, f)
        time.sleep(0.02)  # the child exiting
        command = "python -m engine.execution.gpu_step"
        return processes.ProcessResult(command, 0, "", "", 0.07, False)

    def check(device, *, fresh=False):
        time.sleep(0.03)
        return health_probe.Health(True, "NVIDIA H200", "resident")

    monkeypatch.setattr(runner.processes, "run", child)
    monkeypatch.setattr(health_probe, "check", check)
    started = time.perf_counter()
    result = runner.gpu_step(item_id=item.id, token=token)
    wall = time.perf_counter() - started
    phases = result["phases_s"]
    assert phases["child_start"] == pytest.approx(0.05, abs=0.02)
    assert phases["child_exit"] == pytest.approx(0.02, abs=0.02)
    assert phases["health_probe"] >= 0.03
    assert (phases["setup"], phases["verification"], phases["timing"]) == (0.01, 0.02, 0.03)
    assert phases["record"] >= 0
    assert sum(phases.values()) == pytest.approx(wall, abs=0.02)
    assert result["info"] == {
        "autotune_cached": True,
        "verification_children": 2,
        "health_probe": "resident",
        "mps": "off",  # ENGINE_VERIFY_MPS (engine.gpu.mps): whether verifiers shared an MPS server
    }
    item.refresh_from_db()
    assert item.result == result  # what bench/stack/stack_run.py reads back


def test_an_older_child_without_phases_still_gives_its_outcomes(settings):
    settings.GEMMFORGE_EXECUTOR = "local"
    row = mock.Mock(family="sm90", config={}, id=1)
    row.name = "k"

    def child(argv, **_kwargs):
        with open(argv[argv.index("--out") + 1], "w") as f:
            f.write(json.dumps([{"name": "k", "status": "rejected"}]))
        return processes.ProcessResult("python -m engine.execution.gpu_step", 0, "", "", 0.1, False)

    with mock.patch.object(runner.processes, "run", child):
        phases = runner.Phases()
        outcomes = runner.run_gpu_child("4096x4096x4096_tn", [row], phases=phases)
    assert outcomes == [{"name": "k", "status": "rejected"}]
    assert phases.seconds == {}


def crashing_child(argv, **_kwargs):
    return processes.ProcessResult(
        "python -m engine.execution.gpu_step", -11, "", "Segmentation fault", 1, False
    )


@pytest.mark.parametrize("healthy", [True, False])
def test_a_crashed_step_is_followed_by_a_fresh_probe_that_decides_what_it_was(
    gpu_item, monkeypatch, healthy
):
    item, token = gpu_item
    checks = []

    def check(device, *, fresh=False):
        checks.append(fresh)
        return health_probe.Health(healthy, "NVIDIA H200" if healthy else "Xid 79", "driver")

    monkeypatch.setattr(runner.processes, "run", crashing_child)
    monkeypatch.setattr(health_probe, "check", check)
    expected = runner.StepCrashed if healthy else runner.GpuUnhealthy
    with pytest.raises(expected) as raised:
        runner.gpu_step(item_id=item.id, token=token)
    assert checks == [True]  # a new context must work, not only the resident probe's
    if not healthy:
        assert isinstance(raised.value.__cause__, runner.StepCrashed)
    assert not Candidate.objects.filter(outcome__isnull=False).exists()


def test_a_step_killed_on_its_timeout_is_followed_by_a_fresh_probe(gpu_item, monkeypatch, settings):
    item, token = gpu_item
    checks = []

    def hung_child(argv, **_kwargs):
        return processes.ProcessResult("python -m engine.execution.gpu_step", -9, "", "", 1, True)

    def check(device, *, fresh=False):
        checks.append(fresh)
        return health_probe.Health(True, "NVIDIA H200", "driver")

    monkeypatch.setattr(runner.processes, "run", hung_child)
    monkeypatch.setattr(health_probe, "check", check)
    result = runner.gpu_step(item_id=item.id, token=token)
    assert checks == [True]
    assert result["measured"] == 2
    assert set(Candidate.objects.values_list("outcome__status", flat=True)) == {"timeout"}
