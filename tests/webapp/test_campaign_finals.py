"""A dashboard campaign's finals: once a shape's search stops, a finals work item on its GPU queue
runs engine.execution.final for that shape (compute-sanitizer in rank order, then the fresh-process
re-measurement), stores the result as an imported final is stored, and only then is the shape,
and at last the campaign, done. The GPU parts of the engine's finals are test doubles here (the
sanitizer and remeasure_batch, as tests/engine/execution/test_campaign_final.py has them); the
real path is the gpu-marked test there."""

from __future__ import annotations

import io
import json
import os
import zipfile
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from engine.execution import final as engine_final
from engine.execution.final import top_records
from engine.problem import Problem as EngineProblem
from engine.timing.baseline_names import BASELINES
from tests.engine.execution.test_campaign_final import Verdict, fake_compile
from webapp.campaigns import finals, runner, tasks, work
from webapp.campaigns.artifacts import bundle_records
from webapp.campaigns.models import Campaign, Candidate, Problem, WorkItem
from webapp.campaigns.services import campaign_create

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
SHAPE = "4096x4096x4096"
ENVIRONMENT = {"gpu_name": "NVIDIA H100", "arch": "sm_90", "driver": "580.1", "cuda_runtime": "13"}
STEPS = {
    WorkItem.Kind.COMPILE: runner.compile_step,
    WorkItem.Kind.GPU: runner.gpu_step,
    WorkItem.Kind.FINAL: runner.final_step,
}


@pytest.fixture(autouse=True)
def replay(settings, tmp_path, monkeypatch):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    settings.GEMMFORGE_BATCH_SIZE = 4
    settings.WORK_MAX_ATTEMPTS = 3
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "engine-cache"))


def make_campaign(owner, *, budget: int = 8, final_top: int = 2) -> Campaign:
    campaign = campaign_create(
        owner=owner,
        name="finals",
        layout="tn",
        problems=[EngineProblem.parse(SHAPE, "tn")],
        budget_per_shape=budget,
        proposer_mix={"evolve": 0.5, "random": 0.5},
        final_top=final_top,
        final_device_seconds=3.0,
    )
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    work.campaign_start_work(campaign=campaign)
    return campaign


def next_item(campaign: Campaign) -> WorkItem | None:
    return WorkItem.objects.filter(campaign=campaign, status=WorkItem.Status.QUEUED).first()


def run_item(item: WorkItem) -> dict:
    return runner.work_item_run(item_id=item.id, hostname="gpu0@host", step=STEPS[item.kind])


def search(campaign: Campaign) -> WorkItem:
    """Runs the campaign's search steps; returns the finals item they queued."""
    while (item := next_item(campaign)) is not None and item.kind != WorkItem.Kind.FINAL:
        run_item(item)
    assert item is not None
    return item


def test_a_shapes_finals_are_queued_when_its_search_stops_and_not_before(alice):
    campaign = make_campaign(alice)
    problem = campaign.problems.get()
    while (item := next_item(campaign)) is not None and item.kind != WorkItem.Kind.FINAL:
        problem.refresh_from_db()
        assert (problem.status, problem.stopped) == (Problem.Status.RUNNING, "")
        run_item(item)
    finals_item = WorkItem.objects.get(campaign=campaign, kind=WorkItem.Kind.FINAL)
    assert finals_item == item
    assert (finals_item.queue, finals_item.status) == ("gpu.sm90", WorkItem.Status.QUEUED)
    last_compile = WorkItem.objects.filter(kind=WorkItem.Kind.COMPILE).last()
    assert last_compile.result == {"stopped": "budget"}
    assert finals_item.round == last_compile.round
    problem.refresh_from_db()
    assert (problem.status, problem.stopped) == (Problem.Status.FINALS, "budget")
    assert problem.get_status_display() == "Finals running"
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.RUNNING  # not done while its finals are to run


def test_the_replay_executor_records_why_there_is_no_final_and_the_campaign_completes(
    alice, client
):
    campaign = make_campaign(alice)
    result = run_item(search(campaign))
    assert result["no_final"] == runner.NO_GPU_FINALS == "no GPU: finals not run (replay executor)"
    problem = campaign.problems.get()
    assert (problem.status, problem.stopped) == (Problem.Status.DONE, "budget")
    assert problem.final_error == runner.NO_GPU_FINALS
    assert problem.best  # the search's choice stays: its kernels just lack a verdict
    assert not Candidate.objects.filter(verification_result__has_key="sanitize").exists()
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
    client.force_login(alice)
    page = client.get(reverse("problem-detail", args=[problem.id]))
    shown = page.content.decode()
    assert 'no final: <span id="final-error">no GPU: finals not run (replay executor)<' in shown


class FakeGpu:
    """The GPU parts of the engine's finals: a sanitizer that fails the kernels named in
    ``failing``, and a re-measurement that times each kernel it is given at its search time,
    every baseline at twice that of the slowest (so each kernel beats each baseline)."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.sanitized: list[str] = []
        self.measured: list[list[str]] = []
        self.options: dict = {}
        self.visible_devices: str | None = None
        self.seconds: dict[str, float] = {}

    def sanitizer(self, library, config, problem):
        self.sanitized.append(config.name)
        return Verdict(False, "memcheck") if config.name in self.failing else Verdict(True)

    def remeasure_batch(self, jobs, *, on_record, **options):
        self.options = options
        self.visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        records = []
        for index, (_problem, libraries) in enumerate(jobs):
            self.measured.append(sorted(libraries))
            kernels = {n: self.seconds[n] for n in libraries}
            slowest = 2 * max(kernels.values())
            baselines = {f"{b}_{v}": slowest for b in BASELINES for v in ("nn", "tn")}
            device = {
                "statistic": "median",
                "seconds": {**baselines, **kernels},
                "best_baselines": dict.fromkeys(BASELINES, slowest),
                "speedups": {n: dict.fromkeys(BASELINES, slowest / t) for n, t in kernels.items()},
                "rejected_while_timed": [],
            }
            records.append({"protocols": {"device": device}, "environment": ENVIRONMENT})
            on_record(index, records[-1])
        return records


@pytest.fixture
def gpu(monkeypatch, settings, tmp_path):
    """The GPU parts of a local executor's finals, FakeGpu's (see :func:`searched`)."""
    fake = FakeGpu(set())
    monkeypatch.setattr(runner, "health_check", lambda phases, *, fresh, after=None: None)
    build = fake_compile(tmp_path)
    monkeypatch.setattr(runner, "compile_configs", lambda configs, **_: build(configs))
    monkeypatch.setattr(runner, "sanitize_library", fake.sanitizer)
    monkeypatch.setattr(engine_final, "remeasure_batch", fake.remeasure_batch)
    settings.GEMMFORGE_GPU_DEVICE = "1"
    return fake


def ranked(campaign: Campaign) -> list[str]:
    problem = campaign.problems.get()
    records = bundle_records(problem=problem, protocol=campaign.reward_protocol)
    return [r.name for r in top_records(records, "cublaslt_autotune", len(records))]


def searched(campaign: Campaign, gpu: FakeGpu, monkeypatch) -> tuple[WorkItem, list[str]]:
    """The campaign searched under the replay executor, its finals to run under the local one
    (with ``gpu``'s doubles); its finals item and its verified kernels in rank order, each
    re-measured at its search time."""
    item = search(campaign)
    monkeypatch.setattr(runner, "executor_spec", lambda: "local")
    order = ranked(campaign)
    assert len(order) >= 4
    problem = campaign.problems.get()
    records = bundle_records(problem=problem, protocol=campaign.reward_protocol)
    gpu.seconds = {r.name: r.seconds for r in records if r.seconds}
    return item, order


def test_the_finals_step_runs_the_engine_finals_with_the_campaigns_settings(
    alice, gpu, monkeypatch
):
    applied = []

    def apply(**kw):
        applied.append(kw)
        return finals.problem_apply_final(**kw)

    monkeypatch.setattr(runner, "problem_apply_final", apply)
    campaign = make_campaign(alice, final_top=2)
    item, order = searched(campaign, gpu, monkeypatch)
    result = run_item(item)
    assert gpu.sanitized == order[:2]  # rank order, as many as wanted: both passed
    assert gpu.measured == [sorted(order[:2])]
    assert gpu.options["device_seconds"] == 3.0
    assert gpu.visible_devices == "1"  # the worker's GPU
    assert result.pop("step_s") >= 0  # the step's wall time: the campaign's GPU-busy time
    assert result == {"sanitized": 2, "passed": 2, "final": order[0], "protocol": "device"}
    [call] = applied  # stored as an import stores a final section
    assert call["problem"].id == campaign.problems.get().id
    assert set(call["section"]["sanitize"]) == set(order[:2])
    for name in order[:2]:
        candidate = Candidate.objects.get(name=name)
        assert candidate.verification_result["sanitize"] == {"ok": True, "reason": "ok"}
        assert candidate.timings["device"]["final"]["seconds"] == gpu.seconds[name]
    problem = campaign.problems.get()
    assert problem.best["name"] == order[0]
    assert problem.best["session"]["name"] == "final"
    assert problem.final_error == ""
    assert WorkItem.objects.get(id=item.id).status == WorkItem.Status.DONE


def test_a_kernel_that_fails_the_sanitizer_is_rejected_and_the_bundle_has_the_one_that_passed(
    alice, client, gpu, monkeypatch
):
    campaign = make_campaign(alice, final_top=1)
    item, order = searched(campaign, gpu, monkeypatch)
    gpu.failing = {order[0]}  # the search's best
    result = run_item(item)
    assert gpu.sanitized == order[:2]  # the next in rank order took its place
    assert gpu.measured == [[order[1]]]
    assert result["final"] == order[1]
    failed = Candidate.objects.get(name=order[0])
    assert failed.status == Candidate.Status.REJECTED
    assert failed.verification_result["sanitize"] == {"ok": False, "reason": "memcheck"}
    assert failed.failure_reason == "compute-sanitizer: memcheck"
    problem = campaign.problems.get()
    assert problem.best["name"] == order[1]
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
    client.force_login(alice)
    # every shape's chosen kernel (its fake final kept no noise to call it faster than torch)
    response = client.get(reverse("campaign-bundle", args=[campaign.id]) + "?slower=1")
    assert response.status_code == 200
    zf = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    [manifest] = [n for n in zf.namelist() if n.endswith("gemmforge_bundle/kernels.json")]
    kernels = json.loads(zf.read(manifest))["kernels"]
    assert [k["name"] for k in kernels] == [order[1]]


def test_a_shape_whose_kernels_all_fail_the_sanitizer_ends_with_the_reason(alice, gpu, monkeypatch):
    campaign = make_campaign(alice, final_top=1)
    item, order = searched(campaign, gpu, monkeypatch)
    gpu.failing = set(order)
    result = run_item(item)
    assert gpu.sanitized == order[:3]  # three times the kernels wanted, then it gives up
    assert gpu.measured == []
    problem = campaign.problems.get()
    assert problem.status == Problem.Status.DONE
    assert problem.final_error.startswith("no kernel passed: the 3 best verified kernels")
    assert result["no_final"] == problem.final_error
    assert problem.best.get("name") not in order[:3]


def test_a_crashed_finals_item_is_retried_and_gives_up_at_the_attempt_cap(alice, settings):
    campaign = make_campaign(alice)
    item = search(campaign)
    settings.GEMMFORGE_CRASH_STEP = "final"
    for attempt in range(1, 4):
        run_item(WorkItem.objects.get(id=item.id))
        item.refresh_from_db()
        assert item.attempts == attempt
    assert item.status == WorkItem.Status.FAILED
    assert item.reason.startswith("gave up after 3 attempts; last: RuntimeError: injected crash")
    problem = campaign.problems.get()
    assert problem.status == Problem.Status.FAILED
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.FAILED


def test_a_finals_item_that_crashed_once_finishes_on_its_next_attempt(alice, settings):
    campaign = make_campaign(alice)
    item = search(campaign)
    settings.GEMMFORGE_CRASH_STEP = "final"
    assert "error" in run_item(item)
    item.refresh_from_db()
    assert (item.status, item.attempts) == (WorkItem.Status.QUEUED, 1)
    settings.GEMMFORGE_CRASH_STEP = ""
    run_item(item)
    item.refresh_from_db()
    assert (item.status, item.attempts) == (WorkItem.Status.DONE, 2)
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE


def test_an_expired_finals_lease_is_sent_again_to_the_finals_task(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(
        tasks.final_step, "apply_async", lambda args, queue, countdown: sent.append((args, queue))
    )
    campaign = make_campaign(alice)
    item = search(campaign)
    assert work.work_item_claim(item_id=item.id, hostname="dead@host")
    WorkItem.objects.filter(id=item.id).update(lease_expires=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert work.work_requeue()["requeued"] == 1
    item.refresh_from_db()
    assert (item.status, item.attempts) == (WorkItem.Status.QUEUED, 1)
    assert sent == [([item.id], "gpu.sm90")]


def test_a_shape_in_its_finals_says_what_it_waits_for(alice):
    from webapp.campaigns import live
    from webapp.workers.selectors import heartbeats_read

    campaign = make_campaign(alice)
    item = search(campaign)
    waits = live.campaign_waits(campaign=campaign, heartbeats=heartbeats_read())
    assert waits == {item.problem_id: f"round {item.round}: finals waits for a worker of "
                     "gpu.sm90 (none online)"}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_a_dashboard_shapes_finals_sanitize_and_re_measure_its_best_kernel(
    alice, monkeypatch
):
    """The real finals step: the replayed search's best configs built with nvcc, run under
    compute-sanitizer and re-measured beside every baseline in a fresh process."""
    campaign = make_campaign(alice, budget=4, final_top=1)
    item = search(campaign)
    monkeypatch.setattr(runner, "executor_spec", lambda: "local")
    result = run_item(item)
    assert "final" in result, result
    problem = campaign.problems.get()
    chosen = Candidate.objects.get(problem=problem, name=result["final"])
    assert chosen.verification_result["sanitize"]["ok"] is True
    assert problem.best["name"] == chosen.name
    assert problem.best["session"]["name"] == "final"
    assert problem.final_error == ""
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
