"""Work items with leases, run eagerly (tasks in-process) with the replay executor."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.utils import timezone

from engine.problem import Problem as EngineProblem
from webapp.campaigns import runner, work
from webapp.campaigns.models import Campaign, Candidate, Problem, WorkItem
from webapp.campaigns.services import campaign_create
from webapp.campaigns.times import campaign_times
from webapp.workers.models import WorkerHeartbeat

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"


@pytest.fixture(autouse=True)
def replay(settings):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    settings.GEMMFORGE_BATCH_SIZE = 4
    settings.WORK_MAX_ATTEMPTS = 3


def make_campaign(owner, shapes=("4096x4096x4096", "1024x1024x1024"), budget=8) -> Campaign:
    return campaign_create(
        owner=owner,
        name="distributed",
        layout="tn",
        problems=[EngineProblem.parse(s, "tn") for s in shapes],
        budget_per_shape=budget,
        proposer_mix={"evolve": 0.5, "random": 0.5},
    )


def run_everything(capture) -> None:
    with capture(execute=True):
        work.work_requeue()


@pytest.mark.slow
def test_a_campaign_runs_to_done_through_compile_and_gpu_steps(
    alice, django_capture_on_commit_callbacks
):
    campaign = make_campaign(alice)
    run_everything(django_capture_on_commit_callbacks)
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
    for problem in campaign.problems.all():
        assert (problem.status, problem.stopped) == (Problem.Status.DONE, "budget")
        assert problem.candidates.filter(outcome__isnull=False).count() == 8
        assert problem.best_speedups["cublaslt_autotune"] > 0
    items = WorkItem.objects.filter(campaign=campaign)
    assert set(items.values_list("status", flat=True)) == {WorkItem.Status.DONE}
    assert set(items.values_list("queue", flat=True)) == {"compile", "gpu.sm90"}
    assert set(items.values_list("attempts", flat=True)) == {1}
    times = campaign_times(campaign=campaign, now=timezone.now())
    assert times is not None
    assert times.candidates == 16
    assert times.gpu_busy_s > 0
    assert times.first_verified_s is not None
    assert times.finals_done_s is not None
    assert times.finals_done_s <= times.wall_s


def test_an_item_is_claimed_once_and_a_redelivered_task_is_a_no_op(alice):
    campaign = make_campaign(alice, shapes=("4096x4096x4096",))
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    item = work.work_item_create(problem=campaign.problems.get(), kind="compile", round=0)
    token = work.work_item_claim(item_id=item.id, hostname="a@host")
    assert token
    assert work.work_item_claim(item_id=item.id, hostname="b@host") is None
    result = runner.work_item_run(item_id=item.id, hostname="b@host", step=runner.compile_step)
    assert "skipped" in result


def test_a_paused_campaign_is_not_claimed(alice):
    campaign = make_campaign(alice, shapes=("4096x4096x4096",))
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.PAUSED)
    item = work.work_item_create(problem=campaign.problems.get(), kind="compile", round=0)
    assert work.work_item_claim(item_id=item.id, hostname="a@host") is None


def test_an_expired_lease_is_requeued_and_fails_at_the_attempt_cap(alice, settings):
    campaign = make_campaign(alice, shapes=("4096x4096x4096",))
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    item = work.work_item_create(problem=campaign.problems.get(), kind="compile", round=0)
    for attempt in range(1, 4):
        assert work.work_item_claim(item_id=item.id, hostname="dead@host")
        WorkItem.objects.filter(id=item.id).update(
            lease_expires=timezone.now() - timedelta(seconds=1)
        )
        call_command("requeue_work")
        item.refresh_from_db()
        assert item.attempts == attempt
    assert item.status == WorkItem.Status.FAILED
    assert item.reason == "gave up after 3 attempts; last: lease expired on dead@host (attempt 3)"
    assert Problem.objects.get().status == Problem.Status.FAILED
    assert Campaign.objects.get().status == Campaign.Status.FAILED


def test_a_step_that_always_crashes_stops_at_the_attempt_cap(
    alice, settings, django_capture_on_commit_callbacks
):
    settings.GEMMFORGE_CRASH_STEP = "gpu"
    campaign = make_campaign(alice, shapes=("4096x4096x4096",))
    run_everything(django_capture_on_commit_callbacks)
    gpu = WorkItem.objects.get(kind="gpu")
    assert (gpu.status, gpu.attempts) == (WorkItem.Status.FAILED, 3)
    assert gpu.reason.startswith("gave up after 3 attempts; last: RuntimeError: injected crash")
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.FAILED
    assert Candidate.objects.filter(outcome__isnull=False).count() == 0


@pytest.mark.slow
def test_a_hanging_compile_is_timed_out_recorded_and_the_campaign_goes_on(
    alice, settings, django_capture_on_commit_callbacks
):
    settings.GEMMFORGE_COMPILE_HOOK = "sleep 30"
    settings.COMPILE_STEP_TIMEOUT = 1
    campaign = make_campaign(alice, shapes=("4096x4096x4096",), budget=4)
    run_everything(django_capture_on_commit_callbacks)
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
    rows = Candidate.objects.all()
    assert rows.count() == 4
    assert {r.compile_status for r in rows} == {Candidate.CompileStatus.TIMEOUT}
    assert "compile step timed out after 1 s: sleep 30" in rows[0].failure_reason


def test_a_failing_gpu_probe_stops_the_gpu_queue_and_shows_on_the_heartbeat(alice):
    campaign = make_campaign(alice, shapes=("4096x4096x4096",))
    Campaign.objects.filter(id=campaign.id).update(status=Campaign.Status.RUNNING)
    problem = campaign.problems.get()
    item = work.work_item_create(problem=problem, kind="gpu", round=0)
    WorkerHeartbeat.objects.create(
        hostname="gpu0@h200", queues=["gpu.sm90"], started=timezone.now(), last_seen=timezone.now()
    )

    def sick(**kwargs):
        raise runner.GpuUnhealthy("CUDA call failed on GPU 0: Xid 79")

    with mock.patch("webapp.celery.app.control.cancel_consumer", autospec=True) as cancel:
        runner.work_item_run(item_id=item.id, hostname="gpu0@h200", step=sick)
    cancel.assert_called_once_with("gpu.sm90", destination=["gpu0@h200"], reply=True, timeout=5)
    heartbeat = WorkerHeartbeat.objects.get()
    assert heartbeat.gpu_failure == "CUDA call failed on GPU 0: Xid 79"
    assert heartbeat.queues == []
    assert not heartbeat.serves_gpu
    item.refresh_from_db()
    assert (item.status, item.attempts) == (WorkItem.Status.QUEUED, 0)  # handed on, not counted


@pytest.mark.slow
def test_a_transfer_campaign_starts_from_an_earlier_campaigns_winners(
    alice, django_capture_on_commit_callbacks
):
    earlier = make_campaign(alice, shapes=("4096x4096x4096",), budget=8)
    run_everything(django_capture_on_commit_callbacks)
    winners = list(
        Candidate.objects.filter(problem__campaign=earlier, status=Candidate.Status.DONE)
        .order_by("-reward")
        .values_list("name", flat=True)[:4]
    )
    later = campaign_create(
        owner=alice,
        name="transfer",
        layout="tn",
        problems=[EngineProblem.parse("4096x4096x4096", "tn")],
        budget_per_shape=4,
        proposer_mix={"transfer": 1.0},
    )
    run_everything(django_capture_on_commit_callbacks)
    later.refresh_from_db()
    assert later.status == Campaign.Status.DONE
    proposed = Candidate.objects.filter(problem__campaign=later)
    assert set(proposed.values_list("name", flat=True)) == set(winners)
    assert set(proposed.values_list("proposer", flat=True)) == {"transfer"}
    for candidate in proposed:  # where each came from, kept from proposal to record
        assert candidate.proposal == {"carried_from": "4096x4096x4096_tn"}
        assert candidate.outcome["meta"] == candidate.proposal


# -- a broker that lost its messages; cancel; a worker shutting down -----------------------------


def queued_item(owner, *, status=Campaign.Status.RUNNING, age_s: float = 60) -> WorkItem:
    campaign = make_campaign(owner, shapes=("4096x4096x4096",))
    Campaign.objects.filter(id=campaign.id).update(status=status)
    item = work.work_item_create(problem=campaign.problems.get(), kind="compile", round=0)
    WorkItem.objects.filter(id=item.id).update(enqueued=timezone.now() - timedelta(seconds=age_s))
    return item


def test_a_worker_connecting_re_sends_what_was_queued_before_once(alice):
    item = queued_item(alice)
    paused = queued_item(alice, status=Campaign.Status.PAUSED)
    connected = timezone.now().timestamp()
    with mock.patch.object(work, "work_send", autospec=True) as send:
        assert work.work_resend_queued(before=connected) == 1
        # a second worker that connected at the same moment sends nothing more
        assert work.work_resend_queued(before=connected) == 0
    send.assert_called_once_with(item_id=item.id, kind="compile", queue="compile")
    assert WorkItem.objects.get(id=paused.id).status == WorkItem.Status.QUEUED


def test_an_item_sent_after_the_connection_is_not_sent_again(alice):
    queued_item(alice, age_s=0)
    with mock.patch.object(work, "work_send", autospec=True) as send:
        assert work.work_resend_queued(before=timezone.now().timestamp() - 30) == 0
    send.assert_not_called()


def test_the_connect_task_calls_the_re_send(alice):
    from webapp.campaigns import tasks

    queued_item(alice)
    with mock.patch.object(work, "work_send", autospec=True):
        assert tasks.work_resend.delay(before=timezone.now().timestamp()).get() == 1


def test_a_cancelled_campaigns_step_records_nothing(alice):
    item = queued_item(alice)
    token = work.work_item_claim(item_id=item.id, hostname="a@host")
    Campaign.objects.filter(id=item.campaign_id).update(status=Campaign.Status.CANCELLED)
    assert not work.work_item_ours(item_id=item.id, token=token)
    with pytest.raises(work.LeaseLost, match="cancelled"):
        work.work_item_hold(item_id=item.id, token=token)
    with pytest.raises(work.LeaseLost, match="cancelled"):  # the whole step, proposals made
        runner.compile_step(item_id=item.id, token=token)
    assert not Candidate.objects.filter(problem__campaign_id=item.campaign_id).exists()


def test_the_lease_keeper_stops_the_steps_children_once_the_campaign_is_cancelled(alice, settings):
    settings.WORK_STOP_POLL_SECONDS = 1
    item = queued_item(alice)
    token = work.work_item_claim(item_id=item.id, hostname="a@host")
    with mock.patch.object(work, "work_item_ours", autospec=True, return_value=False), \
         mock.patch.object(work.processes, "stop_children", autospec=True) as stop:  # fmt: skip
        keeper = work.LeaseKeeper(item_id=item.id, token=token)
        with keeper:
            keeper.join(5)
    assert keeper.lost
    stop.assert_called_once()
    assert "its campaign was cancelled" in stop.call_args.args[0]


def test_a_worker_shutting_down_hands_its_running_items_back(alice):
    item = queued_item(alice)
    other = queued_item(alice)
    work.work_item_claim(item_id=item.id, hostname="leaving@host")
    work.work_item_claim(item_id=other.id, hostname="staying@host")
    with mock.patch.object(work, "work_send", autospec=True):
        assert work.work_release_worker(hostname="leaving@host") == 1
    item.refresh_from_db()
    assert (item.status, item.attempts, item.lease_token) == (WorkItem.Status.QUEUED, 0, "")
    assert item.reason == "released by leaving@host, shutting down"
    assert WorkItem.objects.get(id=other.id).status == WorkItem.Status.RUNNING
