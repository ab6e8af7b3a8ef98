"""The campaign's steps as services: a round's compile step and its GPU step, for one problem.

A round is engine.campaign.round's, the one ``engine optimize`` runs: what is proposed, how an
outcome becomes a CandidateRecord, its reward and what the policy learns are decided there; this
module adapts storage (DjangoStorage), scheduling (work items, queues) and leases.

compile step (queue ``compile``): the arch's shared policy (engine.propose.policy.PolicyFile)
learns the round before's rewards (once: a retried step learns nothing twice), then the round's
proposers, rebuilt from the stored history, propose a batch; it is rendered and compiled and the
candidates stored; then a GPU step (queue ``gpu.<arch>`` of the problem)
or, when nothing is left to run, the problem's stop reason. GPU step: run the batch in a child
process (``python -m engine.execution.gpu_step`` in the candidate sandbox of
engine.isolation.sandbox: allow-listed environment, CUDA_VISIBLE_DEVICES pinned, the GPU children's
limits, its process group killed on timeout; the worker never initialises CUDA), probe the GPU's
health (engine.gpu.health_probe.check), record the outcomes through DjangoStorage and queue the next
round's compile step. Once a problem's search stops, its finals step (queue ``gpu.<arch>`` too)
runs engine.execution.final for that shape, as ``engine optimize`` does at its end, and stores it
as an imported final is stored (webapp.campaigns.finals). Each step commits only while it holds its
work item's lease, so a step that lost its lease (its worker was presumed dead) changes nothing, and
a candidate is recorded once.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from celery.signals import worker_process_shutdown
from django.conf import settings
from django.db import transaction

from engine.campaign.loop import compile_configs
from engine.campaign.round import (
    DEFAULT_MIX,
    Round,
    RoundSettings,
    batch_size_for,
    build_failure,
    compile_failure,
    proposal_of,
)
from engine.config import load as load_engine_config
from engine.execution import gpu_child
from engine.execution.executor import Outcome, ReplayTable
from engine.execution.final import (
    GIVE_UP_FACTOR,
    SavedFinals,
    final_choice,
    no_choice_reason,
    sanitize_library,
    shape_final,
    top_records,
)
from engine.execution.gpu_child import StandbyStep
from engine.gpu import health_probe, mps
from engine.isolation import processes
from engine.outcomes import CandidateStatus
from engine.propose.mix import PROPOSER_NAMES, make_proposers
from engine.propose.policy import PolicyFile, policy_families, policy_path, pretrained_path
from engine.propose.proposers import TRANSFER_TOP
from engine.propose.space import SearchSpace, families_for_arch
from engine.timing.phases import Phases
from webapp.campaigns import artifact_store
from webapp.campaigns.artifacts import bundle_records
from webapp.campaigns.finals import problem_apply_final
from webapp.campaigns.models import Campaign, Candidate, Problem, WorkItem
from webapp.campaigns.storage import DjangoStorage, measured_winners, source_hash, source_of
from webapp.campaigns.work import (
    LeaseKeeper,
    LeaseLost,
    campaign_finish_if_done,
    work_item_claim,
    work_item_create,
    work_item_done,
    work_item_hold,
    work_item_retry_or_fail,
)

logger = logging.getLogger(__name__)


class GpuUnhealthy(Exception):
    """The GPU failed its health probe after a step: the step's results are not trusted."""


class StepCrashed(Exception):
    """A step failed in a way that another attempt may fix (its child crashed, say)."""


# -- configuration -----------------------------------------------------------------------------
def executor_spec() -> str:
    """settings.GEMMFORGE_EXECUTOR with a replay path made absolute."""
    spec = settings.GEMMFORGE_EXECUTOR
    if spec.startswith("replay:"):
        path = Path(spec[len("replay:") :])
        return f"replay:{path if path.is_absolute() else settings.BASE_DIR / path}"
    return spec


@functools.cache
def replay_table(spec: str) -> Any:
    return ReplayTable.load([spec[len("replay:") :]])


def search_space(problem: Problem, kind: str) -> Any:
    """The campaign's space (``kind``: full or library); replay: the recorded table's configs.
    A compile worker keeps the last few: each step of a problem asks for the same one, and a
    full space takes ≈ 0.2 s to build on sm80 (39 000 configs checked against the problem) and
    ≈ 2 s on sm90 (275 000, sm80's included)."""
    return _search_space(problem.as_engine(), problem.arch, kind, executor_spec())


# a full sm90 space is ≈ 60 MB (275 000 configs: their names, the list, the knob-code matrix)
SPACES_KEPT = 8


@functools.lru_cache(maxsize=SPACES_KEPT)
def _search_space(engine_problem: Any, arch: str, kind: str, spec: str) -> Any:
    if spec.startswith("replay:"):
        table = replay_table(spec)
        return SearchSpace.from_configs(engine_problem, table.configs_for(engine_problem))
    families = families_for_arch(arch)
    if kind == Campaign.SearchSpace.LIBRARY:
        return SearchSpace.library(engine_problem, families=families)
    return SearchSpace.full(engine_problem, families=families)


def proposer_mix(campaign: Campaign) -> dict[str, float]:
    mix = {k: float(v) for k, v in (campaign.proposer_mix or {}).items() if k in PROPOSER_NAMES}
    return {k: v for k, v in mix.items() if v > 0} or dict(DEFAULT_MIX)


def crash_hook(kind: str) -> None:
    if kind == settings.GEMMFORGE_CRASH_STEP:
        raise RuntimeError(f"injected crash in the {kind} step (GEMMFORGE_CRASH_STEP={kind})")


def round_settings(campaign: Campaign) -> Any:
    """The campaign's engine.campaign.round.RoundSettings: its budget and mix, its seed, and a
    batch that gives each shape several rounds (at most GEMMFORGE_BATCH_SIZE)."""

    budget = campaign.budget_per_shape
    return RoundSettings(
        budget=budget,
        batch_size=batch_size_for(budget, cap=settings.GEMMFORGE_BATCH_SIZE),
        mix=proposer_mix(campaign),
        seed=campaign.seed,
    )


def shared_policy(arch: str) -> Any:
    """The arch's policy file (engine.propose.policy.PolicyFile) in the engine's cache
    (ENGINE_CACHE_DIR), the one ``engine optimize`` uses; where none is saved yet, it starts
    from the pretrained policy the repository ships for the arch."""

    path = policy_path(load_engine_config().cache_dir, arch)
    return PolicyFile(path, policy_families(arch), start=pretrained_path(arch))


def policy_stream(campaign: Campaign, problem: Problem) -> str:
    """Names a campaign's problem in the policy's once-per-round bookkeeping."""
    return f"campaign-{campaign.id}/{problem.as_engine().key}"


# -- the compile step --------------------------------------------------------------------------
def compile_step(*, item_id: int, token: str) -> dict[str, Any]:
    item = WorkItem.objects.select_related("problem", "campaign").get(id=item_id)
    campaign, problem = item.campaign, item.problem
    storage = DjangoStorage(campaign)
    engine_problem = problem.as_engine()
    history = storage.candidates(campaign.name, engine_problem.key)
    space = search_space(problem, campaign.search_space)
    rounds = round_settings(campaign)
    policy_file = shared_policy(problem.arch) if "rl" in rounds.mix else None
    known = []
    if "transfer" in rounds.mix:
        known = measured_winners(problem.arch, top=TRANSFER_TOP)
    proposers = make_proposers(
        rounds.mix, policy=policy_file.policy if policy_file else None, known=known
    )
    round_ = Round(rounds, proposers, learner=policy_file)
    if item.round > 0:  # the GPU step before: its rewards, learnt once, before any proposal
        last = [r for r in history if r.round == item.round - 1]
        stream = policy_stream(campaign, problem)
        round_.learn(engine_problem, space, last, stream=stream, round_no=item.round - 1)
    tried = set(Candidate.objects.filter(problem=problem).values_list("name", flat=True))
    room = round_.room(history)
    if room <= 0 or len(tried & space.by_name.keys()) >= len(space):
        return _finish_problem(item, token, "budget" if room <= 0 else "exhausted")
    if history:
        round_.observe(engine_problem, space, history)
    batch = round_.propose(engine_problem, space, history, round_no=item.round, exclude=tried)
    if not batch:
        return _finish_problem(item, token, "exhausted")
    crash_hook("compile")
    failures = compile_batch([p.config for p in batch], arch=problem.arch)
    failed_records = round_.records(
        [p for p in batch if p.config.name in failures], failures, round_no=item.round
    )
    with transaction.atomic():
        item = work_item_hold(item_id=item_id, token=token)
        parents = {
            c.name: c
            for c in Candidate.objects.filter(
                problem=problem, name__in=[p.parent for p in batch if p.parent]
            )
        }
        compiled_ids = []
        for proposal in batch:  # every row in the batch's order: the history's order
            config = proposal.config
            source = source_of(config.FAMILY, config.knobs())
            failed = config.name in failures
            row = Candidate.objects.create(
                problem=problem,
                name=config.name,
                family=config.FAMILY,
                config=config.knobs(),
                source=source,
                source_hash=source_hash(source),
                proposer=proposal.proposer,
                parent=parents.get(proposal.parent or ""),
                status=Candidate.Status.FAILED if failed else Candidate.Status.COMPILED,
                compile_status=Candidate.CompileStatus.ERROR
                if failed
                else Candidate.CompileStatus.OK,
                proposal=dict(proposal.meta),
            )
            if not failed:
                compiled_ids.append(row.id)
        if failed_records:
            storage.record(campaign.name, engine_problem.key, failed_records)
        if compiled_ids:
            work_item_create(
                problem=problem,
                kind=WorkItem.Kind.GPU,
                round=item.round,
                payload={"candidates": compiled_ids},
            )
        else:
            work_item_create(problem=problem, kind=WorkItem.Kind.COMPILE, round=item.round + 1)
        result = {"proposed": len(batch), "compiled": len(compiled_ids), "failed": len(failures)}
        work_item_done(item, result=result)
    return result


def compile_batch(configs: list[Any], *, arch: str | None = None) -> dict[str, Any]:
    """Compile failures by name (engine.execution.executor.Outcome, classified by
    engine.campaign.round); an empty dict when all built.

    With the local executor the configs are compiled with nvcc for ``arch`` (the problem's, so
    the cache keys match the GPU step's and kernels prebuilt for that GPU) into the engine's
    compile cache (the GPU step, on this host, finds them there), and each library built is
    published to the artifact store (a GPU step on another host fetches it from there; see
    webapp.campaigns.artifact_store). GEMMFORGE_COMPILE_HOOK, when
    set, runs as well, once per step, under COMPILE_STEP_TIMEOUT: a hook that hangs times the
    batch out.
    """

    failures: dict[str, Any] = {}
    if executor_spec() == "local":
        built = compile_configs(configs, target_arch=arch)
        for config, result in zip(configs, built, strict=True):
            failure = compile_failure(config.name, result)
            if failure is not None:
                failures[config.name] = failure
        artifact_store.artifacts_publish_built(
            keys=[r.key for r in built if r.ok and r.library is not None]
        )
    if settings.GEMMFORGE_COMPILE_HOOK:
        ran = processes.run(
            shlex.split(settings.GEMMFORGE_COMPILE_HOOK), timeout=settings.COMPILE_STEP_TIMEOUT
        )
        if ran.timed_out or not ran.ok:
            message = (
                f"compile step timed out after {settings.COMPILE_STEP_TIMEOUT} s: {ran.command}"
                if ran.timed_out
                else f"compile step failed ({ran.returncode}): {ran.stderr[-500:]}"
            )
            failures.update(
                {
                    c.name: build_failure(c.name, timed_out=ran.timed_out, message=message)
                    for c in configs
                }
            )
    return failures


def _finish_problem(item: WorkItem, token: str, reason: str) -> dict[str, Any]:
    """The search of the item's problem stopped (``reason``): its finals are queued on the
    problem's GPU queue, and the problem is in its finals until they are done."""
    with transaction.atomic():
        item = work_item_hold(item_id=item.id, token=token)
        DjangoStorage(item.campaign).set_problem_status(
            item.campaign.name, item.problem.as_engine().key, reason
        )
        Problem.objects.filter(id=item.problem_id).update(status=Problem.Status.FINALS)
        work_item_create(problem=item.problem, kind=WorkItem.Kind.FINAL, round=item.round)
        work_item_done(item, result={"stopped": reason})
    return {"stopped": reason}


# -- the finals --------------------------------------------------------------------------------
NO_GPU_FINALS = "no GPU: finals not run (replay executor)"


def final_step(*, item_id: int, token: str) -> dict[str, Any]:
    """A shape's finals once its search stopped (engine.execution.final, as `engine optimize`
    runs them at its end): its best verified kernels sanitized in rank order until the
    campaign's ``final_top`` pass, then re-measured in a fresh process beside every baseline.
    The final section is stored as an imported one is (webapp.campaigns.finals), and the shape
    is done; the campaign is, once every shape is."""
    started = time.perf_counter()
    item = WorkItem.objects.select_related("problem", "campaign").get(id=item_id)
    campaign, problem = item.campaign, item.problem
    crash_hook("final")
    section = shape_finals(campaign, problem)
    phases = Phases()
    health_check(phases, fresh=False)
    with transaction.atomic():
        item = work_item_hold(item_id=item_id, token=token)
        problem_apply_final(problem=problem, section=section)
        problem.status = Problem.Status.DONE
        problem.save(update_fields=["status", "updated"])
        result = {**final_result(section), "step_s": round(time.perf_counter() - started, 3)}
        work_item_done(item, result=result)
        campaign_finish_if_done(campaign_id=campaign.id)
    return result


def shape_finals(campaign: Campaign, problem: Problem) -> dict[str, Any]:
    """The shape's final section (engine.execution.final.shape_final) over its recorded
    candidates, with the campaign's settings; with the replay executor, which has no GPU to
    sanitize or time on, the reason there is none."""
    if executor_spec() != "local":
        return {"error": NO_GPU_FINALS}
    baseline = round_settings(campaign).baseline
    records = bundle_records(problem=problem, protocol=campaign.reward_protocol)
    ranked = top_records(records, baseline, GIVE_UP_FACTOR * campaign.final_top)
    artifact_store.artifacts_fetch_batch(  # what compile workers elsewhere built
        candidates=[(r.family, r.knobs) for r in ranked if r.source is None], arch=problem.arch
    )
    with gpu_pinned(settings.GEMMFORGE_GPU_DEVICE):
        return shape_final(
            problem.as_engine(),
            records,
            baseline=baseline,
            top=campaign.final_top,
            compile=lambda configs: compile_configs(configs, target_arch=problem.arch),
            device_seconds=campaign.final_device_seconds,
            sanitizer=sanitize_library,
            progress=lambda message: logger.info("finals of %s: %s", problem, message),
            saved=SavedFinals(saved_finals_path(problem)),
        )


def saved_finals_path(problem: Problem) -> Path:
    """Where a shape's finals keep what they measured (engine.execution.final.SavedFinals), in
    the engine's cache: a retried finals item on this host sanitizes and measures nothing twice."""
    folder = load_engine_config().cache_dir / "web-finals"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"campaign-{problem.campaign_id}-problem-{problem.id}.json"


@contextlib.contextmanager
def gpu_pinned(device: str) -> Iterator[None]:
    """The finals' children (compute-sanitizer, the re-measurement) take their GPU from this
    process's environment (engine.isolation.sandbox passes CUDA_ variables on): this worker's."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def final_result(section: dict[str, Any]) -> dict[str, Any]:
    """The finals item's result: the kernel the final chose and in which protocol, or why none;
    how many kernels it sanitized and how many passed."""
    verdicts = section.get("sanitize") or {}
    result = {
        "sanitized": len(verdicts),
        "passed": sum(bool(v.get("ok")) for v in verdicts.values()),
    }
    choice = final_choice(section)
    if choice is None:
        return {**result, "no_final": no_choice_reason(section)}
    kernel, protocol = choice
    return {**result, "final": kernel, "protocol": protocol}


# -- the GPU step ------------------------------------------------------------------------------
def gpu_step(*, item_id: int, token: str) -> dict[str, Any]:
    """Its result says where the step's time went: ``phases_s`` (engine.timing.phases; they add up
    to the step's wall time here) and ``info`` (verification children, autotune cached or not, the
    heat-up that ran, which CUDA call the health probe made)."""

    started = time.perf_counter()
    phases = Phases()
    item = WorkItem.objects.select_related("problem", "campaign").get(id=item_id)
    campaign, problem = item.campaign, item.problem
    key = problem.as_engine().key
    rows = list(
        Candidate.objects.filter(
            id__in=item.payload.get("candidates", []), outcome__isnull=True
        ).order_by("id")
    )  # a re-run skips what an earlier attempt recorded
    crash_hook("gpu")
    if rows and executor_spec() == "local":  # what compile workers elsewhere built
        with phases("artifact_fetch"):
            fetched = artifact_store.artifacts_fetch_batch(
                candidates=[(r.family, r.config) for r in rows], arch=problem.arch
            )
        if fetched.get("installed") or fetched.get("refused"):
            phases.info["artifacts"] = fetched
    if rows and executor_spec() == "local":  # before the first (standby) step child starts
        phases.info["mps"] = mps.ensure_for_verification(
            load_engine_config().verify_mps, gpu=settings.GEMMFORGE_GPU_DEVICE
        )
    try:
        protocol = campaign.reward_protocol
        outcomes = run_gpu_child(key, rows, phases=phases, protocol=protocol) if rows else []
    except StepCrashed as crash:
        health_check(phases, fresh=True, after=crash)
        raise
    health_check(phases, fresh=any(o.get("reason") == "gpu_timeout" for o in outcomes))
    recording = time.perf_counter()
    batch = [
        proposal_of(
            family=r.family,
            knobs=r.config,
            proposer=r.proposer,
            parent=r.parent.name if r.parent_id else None,
            meta=r.proposal,
        )
        for r in rows
    ]
    by_name = {o["name"]: Outcome(**o) for o in outcomes}
    records = Round(round_settings(campaign), {}).records(batch, by_name, round_no=item.round)
    with transaction.atomic():
        item = work_item_hold(item_id=item_id, token=token)
        if records:
            DjangoStorage(campaign).record(campaign.name, key, records)
        work_item_create(problem=problem, kind=WorkItem.Kind.COMPILE, round=item.round + 1)
        phases.add("record", time.perf_counter() - recording)
        phases.close(time.perf_counter() - started)
        result = {
            "measured": len(records),
            "ok": sum(r.status == CandidateStatus.OK for r in records),
            "step_s": round(time.perf_counter() - started, 3),  # the campaign's GPU-busy time
            "phases_s": phases.to_dict(),
            "info": phases.info,
        }
        work_item_done(item, result=result)
    return result


def health_check(phases: Phases, *, fresh: bool, after: Exception | None = None) -> None:
    """Every local GPU step is followed by a health probe (engine.gpu.health_probe.check: the
    resident probe, or fresh processes after a step that timed out or crashed); a failed one
    raises GpuUnhealthy, and the step's results are not recorded."""
    if executor_spec() != "local":
        return

    with phases("health_probe"):
        health = health_probe.check(settings.GEMMFORGE_GPU_DEVICE, fresh=fresh)
    phases.info["health_probe"] = health.call
    if not health.ok:
        raise GpuUnhealthy(health.message) from after


def step_args(spec: str, problem_key: str, workdir: Path, *, protocol: str = "device") -> list[str]:
    """engine.execution.gpu_step's arguments for a batch in ``workdir``, with this worker's
    settings."""
    log = settings.GEMMFORGE_EXECUTION_LOG
    return gpu_child.step_args(
        spec,
        problem_key,
        workdir,
        protocol=protocol,
        verify_jobs=settings.GEMMFORGE_VERIFY_JOBS,
        device_seconds=settings.GEMMFORGE_DEVICE_SECONDS,
        # made absolute: the child runs in ``workdir``
        execution_log=settings.BASE_DIR / log if log else None,
        replay_delay_ms=settings.GEMMFORGE_REPLAY_DELAY_MS,
    )


VERIFIED_MARK = gpu_child.VERIFIED_MARK


def standby_step(spec: str, *, warm_after: Path | None = None) -> StandbyStep:
    """A standby GPU step child with this worker's GPU, verification jobs and step timeout."""
    return StandbyStep(
        spec,
        device=settings.GEMMFORGE_GPU_DEVICE,
        verify_jobs=settings.GEMMFORGE_VERIFY_JOBS,
        timeout=settings.GPU_STEP_TIMEOUT,
        warm_after=warm_after,
    )


_standby: StandbyStep | None = None  # this worker process's next step child, warming up


def standby_take(spec: str) -> StandbyStep:
    """The standby step child if it fits, else one started now; a new standby starts meanwhile
    for the step after."""
    global _standby
    child, _standby = _standby, None
    if child is not None and not child.fits(spec, settings.GEMMFORGE_GPU_DEVICE):
        child.discard()
        child = None
    child = child or standby_step(spec)
    _standby = standby_step(spec, warm_after=child.workdir / VERIFIED_MARK)
    return child


def standby_discard() -> None:
    """Ends this process's standby step child, if any (at exit, and in tests)."""
    global _standby
    child, _standby = _standby, None
    if child is not None:
        child.discard()


atexit.register(standby_discard)


@worker_process_shutdown.connect(weak=False, dispatch_uid="gemmforge-gpu-children")
def on_worker_process_shutdown(**_kwargs: Any) -> None:
    """A Celery pool process ends without running atexit: its standby step child, its resident
    health probe and the MPS daemon it started for verification (engine.gpu.mps) end here."""

    standby_discard()
    health_probe.resident_close()
    mps.stop_started()


def run_gpu_child(
    problem_key: str,
    rows: list[Candidate],
    *,
    phases: Phases | None = None,
    protocol: str = "device",
) -> list[dict[str, Any]]:
    """The batch's outcomes from ``python -m engine.execution.gpu_step`` in a child process (a
    standby one when GEMMFORGE_GPU_STANDBY); ``phases`` gets the child's time breakdown, its start
    (spawn, or the batch handed over, to its first statement) and its exit."""
    spec = executor_spec()
    standby = standby_take(spec) if settings.GEMMFORGE_GPU_STANDBY else None
    folder = None if standby else tempfile.TemporaryDirectory(prefix="gemmforge-gpu-")
    try:
        tmp = standby.workdir if standby else Path(folder.name)  # type: ignore[union-attr]
        out = tmp / "outcomes.json"
        (tmp / "batch.json").write_text(
            json.dumps([{"name": r.name, "family": r.family, "knobs": r.config} for r in rows])
        )
        args = step_args(spec, problem_key, tmp, protocol=protocol)
        spawned = time.time()
        # the child renames its outcomes into place as its last act: what is left, its exit
        # (its CUDA context torn down: 0.3 s of each step on the H200), need not hold up the GPU
        done = out.is_file
        if standby is not None:
            ran = standby.run(args, done=done)
        else:
            ran = gpu_child.run_fresh(
                args, tmp, device=settings.GEMMFORGE_GPU_DEVICE,
                timeout=settings.GPU_STEP_TIMEOUT, done=done,
            )  # fmt: skip
        returned = time.time()
        if ran.killed_for == processes.STOPPED:  # cancelled, or the worker is shutting down
            raise LeaseLost(f"GPU step stopped: {ran.stderr[-300:]}")
        if ran.timed_out:
            message = f"GPU step killed after {settings.GPU_STEP_TIMEOUT} s"
            return [
                {
                    "name": r.name,
                    "status": CandidateStatus.TIMEOUT,
                    "reason": "gpu_timeout",
                    "message": message,
                }
                for r in rows
            ]
        if not ran.ok or not out.is_file():
            if ran.killed_for is not None:  # over its memory, file-size or CPU limit
                applied = ran.sandbox.describe() if ran.sandbox else "no sandbox"
                raise StepCrashed(
                    f"GPU step stopped by its sandbox ({ran.killed_for}; {applied}): "
                    f"{ran.stderr[-800:]}"
                )
            raise StepCrashed(f"GPU step exited with {ran.returncode}: {ran.stderr[-800:]}")
        data = json.loads(out.read_text())
    finally:
        if standby is not None:
            standby.cleanup()
        if folder is not None:
            folder.cleanup()
    if isinstance(data, list):  # outcomes alone: a child without the time breakdown
        return data
    if phases is not None:
        phases.add("child_start", data.get("started_at", spawned) - spawned)
        phases.merge(data.get("phases_s", {}))
        phases.add("child_exit", returned - data.get("finished_at", returned))
        phases.info.update(data.get("info", {}))
    return data["outcomes"]


def gpu_child_env(workdir: Path) -> dict[str, str]:
    """The GPU step child's environment (engine.execution.gpu_child) with this worker's GPU."""
    return gpu_child.child_env(workdir, settings.GEMMFORGE_GPU_DEVICE)


# -- running a step under its lease ------------------------------------------------------------
Step = Callable[..., dict[str, Any]]


def work_item_run(*, item_id: int, hostname: str, step: Step) -> dict[str, Any]:
    """Claim, run ``step`` while keeping the lease, and own the failure: retry up to the attempt
    cap; a failed GPU health probe stops this worker's GPU queue and hands the item on."""
    token = work_item_claim(item_id=item_id, hostname=hostname)
    if token is None:
        return {"skipped": "not queued (done, running elsewhere, or its campaign is not running)"}
    with LeaseKeeper(item_id=item_id, token=token):
        try:
            return step(item_id=item_id, token=token)
        except LeaseLost as exc:
            logger.warning("work item %s: %s; its results were dropped", item_id, exc)
            return {"lost": str(exc)}
        except GpuUnhealthy as exc:
            logger.error("GPU failed its health probe on %s: %s", hostname, exc)
            work_item_retry_or_fail(
                item_id=item_id, token=token, reason=f"GPU unhealthy: {exc}", count_attempt=False
            )
            gpu_queue_stop(hostname=hostname, item_id=item_id, reason=str(exc))
            return {"gpu_unhealthy": str(exc)}
        except Exception as exc:  # SoftTimeLimitExceeded included
            logger.exception("work item %s failed on %s", item_id, hostname)
            status = work_item_retry_or_fail(
                item_id=item_id, token=token, reason=f"{type(exc).__name__}: {exc}"
            )
            return {"error": f"{type(exc).__name__}: {exc}", "status": status}


def gpu_queue_stop(*, hostname: str, item_id: int, reason: str) -> None:
    """Make this worker stop consuming the GPU queue and say so on its heartbeat."""
    from webapp.celery import app
    from webapp.workers.services import heartbeat_gpu_failed

    queue = WorkItem.objects.filter(id=item_id).values_list("queue", flat=True).first() or ""
    if hostname and queue:
        try:
            app.control.cancel_consumer(queue, destination=[hostname], reply=True, timeout=5)
        except Exception:
            logger.exception("could not cancel %s's consumer of %s", hostname, queue)
    heartbeat_gpu_failed(hostname=hostname, queue=queue, reason=reason)
