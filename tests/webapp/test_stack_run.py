"""bench/stack/stack_run.py: its arithmetic and samplers here; end to end (marked services and
slow) with a redis-server of its own, real Celery workers, beat and gunicorn, the GPU steps
replayed from the recorded H200 run (no GPU here, so the GPU's busy fraction is null with the
reason)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.campaign.round import batch_size_for
from tests import bench_scripts

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "stack" / "stack_run.py"
RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"


@pytest.fixture(scope="module")
def stack_run():
    return bench_scripts.load("stack/stack_run")


# -- arithmetic --------------------------------------------------------------------------------
def test_busy_fraction_is_the_mean_utilisation_inside_the_window(stack_run):
    samples = [(0.0, 100), (1.0, 50), (2.0, 0), (3.0, 100), (9.0, 100)]
    out = stack_run.busy_fraction(samples, 1.0, 3.0)
    assert out["busy_fraction"] == pytest.approx(0.5)
    assert out["busy_samples_fraction"] == pytest.approx(2 / 3, abs=1e-4)
    assert out["samples"] == 3
    empty = stack_run.busy_fraction(samples, 4.0, 5.0)
    assert empty["busy_fraction"] is None
    assert empty["reason"]


def test_union_and_overlap_seconds(stack_run):
    assert stack_run.union_seconds([(0, 2), (1, 3), (5, 6), (9, 20)], 0, 10) == 5
    steps = [
        {"worker": "gpu0", "started": 0.0, "finished": 4.0},
        {"worker": "gpu1", "started": 3.0, "finished": 5.0},
        {"worker": "gpu0", "started": 6.0, "finished": 7.0},
    ]
    assert stack_run.concurrent_seconds(steps, 0, 10) == pytest.approx(1.0)


def row(status: str, *, updated: float, lease: float | None = None, **extra) -> dict:
    def at(t):
        return datetime.fromtimestamp(t, UTC)

    return {
        "id": 7,
        "kind": "gpu",
        "round": 0,
        "problem_id": 1,
        "campaign_id": 1,
        "queue": "gpu.sm90",
        "status": status,
        "worker": "gpu0@stack",
        "attempts": 1,
        "lease_expires": at(lease) if lease is not None else None,
        "updated": at(updated),
        "result": extra.get("result"),
    }


def test_the_timeline_reads_the_claim_from_the_lease_and_the_end_from_updated(stack_run):
    timeline = stack_run.Timeline()
    claimed = 1000.0
    timeline.observe([row("running", updated=990, lease=claimed + stack_run.LEASE_SECONDS)], 1001)
    timeline.observe([row("done", updated=1012, result={"measured": 8})], 1013)
    [step] = timeline.finished("gpu")
    assert (step["started"], step["finished"]) == (claimed, 1012)
    assert step["result"] == {"measured": 8}


def test_a_step_that_ran_between_two_polls_gets_an_estimated_start(stack_run):
    timeline = stack_run.Timeline()
    timeline.last_poll = 500.0
    timeline.observe([row("done", updated=500.4)], 501)
    [step] = timeline.finished()
    assert step["started"] == 500.0
    assert step["start_estimated"]


def test_the_gpu_steps_phases_are_summed_over_all_and_warm_steps(stack_run):
    """Each GPU step's result holds its phases (the runner's); the report sums them, says what
    the timeline saw beyond them, and keeps the first (cold) step out of the warm totals."""

    def step(started, finished, phases, info=None):
        result = {"measured": 4, "phases_s": phases, "info": info or {}}
        return {"kind": "gpu", "started": started, "finished": finished, "result": result}

    steps = [
        step(0.0, 21.0, {"child_start": 3.0, "verification": 6.0, "baselines": 8.0, "timing": 3.0},
             {"autotune_cached": False, "health_probe": "driver"}),
        step(30.0, 40.0, {"child_start": 3.0, "verification": 1.0, "timing": 3.0, "other": 2.0},
             {"autotune_cached": True, "health_probe": "driver"}),
        {"kind": "gpu", "started": 50.0, "finished": 51.0, "result": {"measured": 0}},
    ]  # fmt: skip
    report = stack_run.phase_report(steps)
    every = report["all"]
    assert every["steps"] == 2  # the step without phases (an older runner's) is left out
    assert every["step_seconds"] == 31.0
    assert every["seconds"]["child_start"] == 6.0
    assert every["seconds"]["unaccounted"] == pytest.approx(2.0)  # 21 - 20 and 10 - 9
    assert sum(every["share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert every["per_step_s"]["timing"] == 3.0
    warm = report["warm"]
    assert warm["steps"] == 1
    assert "baselines" not in warm["seconds"]
    assert warm["seconds"]["verification"] == 1.0
    assert report["info"]["autotune_cached"] == [False, True]
    assert report["info"]["health_probe"] == {"driver": 2}
    assert stack_run.phase_report([]) == {"all": {"steps": 0}, "warm": {"steps": 0}}


def test_the_replay_report_says_why_there_is_no_busy_fraction(stack_run, tmp_path):
    opts = stack_run.parse_args(["--out", str(tmp_path), "--executor", f"replay:{RECORDED_RUN}"])
    report = stack_run.gpu_report(opts, None, stack_run.Timeline(), 0.0, 10.0)
    assert report["busy_fraction"] is None
    assert report["reason"].startswith("replay executor")


def test_split_queues_needs_exactly_two_shapes(stack_run, capsys):
    with pytest.raises(SystemExit):
        stack_run.parse_args(["--split-queues", "--shapes", "4096x4096x4096"])
    opts = stack_run.parse_args(["--split-queues"])
    workers = {w.hostname: w.queues for w in stack_run.plan_workers(opts)}
    assert (workers["gpu0@stack"], workers["gpu1@stack"]) == (("gpu.sm90",), ("gpu.sm80",))


def test_the_logs_are_kept_under_budget_with_head_and_tail(stack_run, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "gpu0.log").write_text("START\n" + "x" * 50_000 + "\nEND")
    (logs / "web.log").write_text("short")
    out = tmp_path / "all.txt"
    stack_run.collect_logs(logs, out, budget=10_000)
    text = out.read_text()
    assert len(text) < 11_000
    assert "START" in text
    assert "END" in text
    assert "characters cut" in text
    assert "short" in text


# -- samplers and Redis ------------------------------------------------------------------------
def test_the_sampler_falls_back_to_nvidia_smi(stack_run, tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nfor u in 0 40 100 100; do echo $u; done\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no nvidia-ml-py
    sampler = stack_run.GpuSampler(0)
    sampler.run()
    assert sampler.source == "nvidia-smi"
    assert [u for _, u in sampler.samples] == [0, 40, 100, 100]


def test_the_sampler_reads_nvml_until_stopped(stack_run, monkeypatch):
    sampler = stack_run.GpuSampler(0)
    readings = iter([30, 70, 90])

    def utilization(_handle):
        value = next(readings, None)
        if value is None:
            sampler.stopping.set()
            value = 90
        return types.SimpleNamespace(gpu=value)

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=utilization,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(stack_run, "SAMPLE_INTERVAL_S", 0.0)
    sampler.run()
    assert sampler.source == "nvml"
    assert [u for _, u in sampler.samples] == [30, 70, 90, 90]


def test_without_nvml_or_nvidia_smi_the_reason_says_so(stack_run, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(stack_run.shutil, "which", lambda name: None)
    sampler = stack_run.GpuSampler(0)
    sampler.run()
    assert not sampler.samples
    assert "nvidia-smi is not on PATH" in sampler.reason


def test_redis_comes_from_path_first(stack_run, monkeypatch, tmp_path):
    monkeypatch.setattr(stack_run.shutil, "which", lambda name: f"/somewhere/{name}")
    found = stack_run.find_redis(None, tmp_path, tmp_path / "root")
    assert (found.path, found.source) == ("/somewhere/redis-server", "PATH")


def test_without_redis_or_packages_the_error_says_what_to_carry(stack_run, monkeypatch, tmp_path):
    monkeypatch.setattr(stack_run.shutil, "which", lambda name: None)
    with pytest.raises(stack_run.StackError, match=r"stack_wheels\.sh"):
        stack_run.find_redis(None, tmp_path, tmp_path / "root")


@pytest.mark.skipif(
    shutil.which("dpkg") is None or not list((ROOT / ".deb").glob("redis-server_*.deb")),
    reason="needs dpkg and the packages bench/device/stack_wheels.sh downloads into .deb/",
)
def test_redis_from_the_debian_packages_runs(stack_run, monkeypatch, tmp_path):
    monkeypatch.setattr(stack_run.shutil, "which", lambda name: None)
    found = stack_run.find_redis(None, ROOT / ".deb", tmp_path / "root")
    version = subprocess.run(
        [found.path, "--version"], env={**os.environ, **found.env}, capture_output=True, text=True
    )
    assert version.returncode == 0
    assert version.stdout.startswith("Redis server v=")


# -- end to end --------------------------------------------------------------------------------
def run_stack(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    if shutil.which("redis-server") is None:
        if os.environ.get("GEMMFORGE_REQUIRE_SERVICES") == "1":
            pytest.fail("redis-server is not installed; ./bin/test installs it")
        pytest.skip("redis-server is not installed; ./bin/test installs it")
    out = tmp_path / "out"
    ran = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--executor", f"replay:{RECORDED_RUN}",
         "--shapes", "4096x4096x4096,1024x1024x1024", "--deadline", "150", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    report = json.loads((out / "stack.json").read_text())
    logs = (out / "stack-logs.txt").read_text() if (out / "stack-logs.txt").exists() else ""
    return ran.returncode, report, f"{ran.stdout}\n{ran.stderr}\n{logs[-6000:]}"


@pytest.mark.services
@pytest.mark.slow
def test_a_campaign_completes_through_the_whole_stack(tmp_path):
    code, report, output = run_stack(
        tmp_path, "--budget", "8", "--batch", "4", "--replay-delay-ms", "300"
    )
    assert code == 0, output
    assert report["ok"]
    assert "error" not in report
    assert report["outcome"] == "finished"
    assert list(report["campaign_status"].values()) == ["done"]
    assert report["launch"]["via"] == ["web form"]
    assert all(report["checks"].values()), report["checks"]
    cand = report["candidates"]
    assert (cand["total"], cand["recorded"], cand["verified"]) == (16, 16, 16)
    assert cand["stored_twice"] == []
    executions = cand["executions"]
    assert executions["total"] == 16
    assert executions["executed_twice"] == []
    assert executions["recorded_not_executed"] == executions["executed_not_recorded"] == []
    assert report["rate"]["candidates_per_hour"] > 0
    [times] = report["dashboard_times"].values()  # what the campaign page says
    assert times["candidates"] == 16
    assert times["gpu_busy_seconds"] >= 8 * 0.3  # 8 GPU steps, each 0.3 s of replay delay
    assert times["finals_done_seconds"] <= times["wall_seconds"]
    gpu = report["gpu"]
    assert gpu["busy_fraction"] is None
    assert gpu["reason"].startswith("replay executor")
    assert 0 < gpu["gpu_worker_occupancy"] <= 1
    phases = gpu["step_phases"]["all"]  # each GPU step's time breakdown, from its result
    steps = 2 * 8 // batch_size_for(8, cap=4)  # 2 shapes × 8 in rounds of budget/4: 8 steps
    assert phases["steps"] == steps
    assert phases["seconds"]["timing"] >= steps * 0.3  # the replay delay stands in for the GPU
    assert {"child_start", "imports", "child_exit", "record", "unaccounted"} <= set(phases["share"])
    workers = report["workers"]
    assert set(workers) == {"default@stack", "compile0@stack", "compile1@stack", "gpu0@stack"}
    # and each shape's finals step (the replay executor records why it ran no sanitizer)
    assert workers["gpu0@stack"]["steps"] == {"gpu:done": steps, "final:done": 2}
    compiled = sum(workers[f"compile{i}@stack"]["steps"].get("compile:done", 0) for i in (0, 1))
    assert compiled == steps + 2  # the rounds that compiled, 2 that found the budget spent
    pages = {k: v for k, v in report["web"].items() if k != "progress"}
    assert all(v["ok"] == v["requests"] > 0 for v in pages.values())
    assert report["web"]["progress"], "progress.json was read"
    assert set(report["exit_status"]) >= {"redis", "web", "beat", "gpu0"}
    assert {"setup", "start_processes", "shutdown"} <= set(report["phases_s"])
    assert (tmp_path / "out" / "stack-db.sqlite3").exists()
    assert len((tmp_path / "out" / "stack-logs.txt").read_bytes()) < 2_100_000


@pytest.mark.services
@pytest.mark.slow
def test_split_queues_route_each_shape_to_its_own_gpu_worker(tmp_path):
    code, report, output = run_stack(
        tmp_path, "--budget", "4", "--batch", "4", "--replay-delay-ms", "1500", "--split-queues"
    )
    assert code == 0, output
    assert all(report["checks"].values()), report["checks"]
    assert sorted(report["campaign_status"].values()) == ["done", "done"]
    workers = report["workers"]
    for host, queue in (("gpu0@stack", "gpu.sm90"), ("gpu1@stack", "gpu.sm80")):
        assert workers[host]["queues"] == [queue]
        steps = 4 // batch_size_for(4, cap=4)
        assert workers[host]["steps"] == {"gpu:done": steps, "final:done": 1}  # its shape's
        assert workers[host]["off_queue_steps"] == []
    gpu_steps = [s for s in report["steps"] if s["kind"] == "gpu"]
    assert {(s["queue"], s["worker"]) for s in gpu_steps} == {
        ("gpu.sm90", "gpu0@stack"),
        ("gpu.sm80", "gpu1@stack"),
    }
    assert all(s["attempts"] == 1 for s in report["steps"])
    assert report["candidates"]["executions"]["executed_twice"] == []
    assert "note" in report["gpu"]
