"""engine.campaign.storage.CampaignStorage over the Campaign, Problem and Candidate models.

One DjangoStorage is bound to one Campaign row, so the engine loop (engine.campaign.Campaign, or
the distributed steps in webapp.campaigns.runner) writes its results where the dashboard reads
them. The engine's campaign name must be the row's name. A candidate is keyed by (problem,
name); a row created before it was measured (a compiled candidate waiting for the GPU: outcome
null) is completed by record(), and recording a name twice is an error, as the protocol says.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from engine.codegen import get_family
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem as EngineProblem
from webapp.campaigns.failures import is_harness_failure
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.campaigns.ratios import problem_refresh_best

# engine stop reasons (engine.campaign.loop.FINAL) end a problem; a few more end it as failed
FAILED_REASONS = ("failed",)


def source_of(family: str, knobs: Mapping[str, Any]) -> str:
    """The .cu source of a config (its name and source hash identify the candidate)."""
    return get_family(family).from_knobs(dict(knobs)).render()


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def candidate_status(record: CandidateRecord) -> tuple[str, str]:
    """(Candidate.Status, Candidate.CompileStatus) of an engine record."""
    if record.status == CandidateStatus.OK:
        return Candidate.Status.DONE, Candidate.CompileStatus.OK
    if record.status == CandidateStatus.COMPILE_ERROR:
        return Candidate.Status.FAILED, Candidate.CompileStatus.ERROR
    if record.status == CandidateStatus.TIMEOUT and record.reason == "nvcc_timeout":
        return Candidate.Status.FAILED, Candidate.CompileStatus.TIMEOUT
    if record.status == CandidateStatus.REJECTED:
        return Candidate.Status.REJECTED, Candidate.CompileStatus.OK
    return Candidate.Status.FAILED, Candidate.CompileStatus.OK


def candidate_timings(record: CandidateRecord) -> dict[str, Any]:
    """Protocol → {"median_s", "baselines"}, the shape the dashboard reads."""
    out: dict[str, Any] = {}
    for protocol, entry in record.timings.items():
        if isinstance(entry, Mapping) and entry.get("seconds") is not None:
            out[protocol] = {
                "median_s": entry["seconds"],
                "baselines": entry.get("baselines", {}),  # timed in the same GPU step
                **{q: entry[q] for q in ("p25", "p75") if isinstance(entry.get(q), int | float)},
                **(
                    {"baseline_quartiles": entry["baseline_quartiles"]}
                    if isinstance(entry.get("baseline_quartiles"), Mapping)
                    else {}
                ),
            }
    return out


def harness_failed(record: CandidateRecord) -> bool:
    return is_harness_failure(
        status=str(record.status), reason=str(record.reason), message=record.message
    )


def record_json(record: CandidateRecord) -> dict[str, Any]:
    return {
        "status": record.status,
        "reason": record.reason,
        "message": record.message,
        "seconds": record.seconds,
        "baselines": dict(record.baselines),
        "timings": dict(record.timings),
        "gpu_seconds": record.gpu_seconds,
        "round": record.round,
        "reward": record.reward,
        "meta": dict(record.meta),  # LLM candidates: the prompt messages and the raw answer
    }


def record_from_row(row: Candidate, parent: str | None) -> CandidateRecord:
    outcome = row.outcome or {}
    return CandidateRecord(
        name=row.name,
        family=row.family,
        knobs=row.config,
        proposer=row.proposer,
        status=outcome.get("status", CandidateStatus.OK),
        reward=outcome.get("reward", row.reward if row.reward is not None else -math.inf),
        parent=parent,
        reason=outcome.get("reason", ""),
        message=outcome.get("message", ""),
        seconds=outcome.get("seconds"),
        baselines=outcome.get("baselines", {}),
        timings=outcome.get("timings", {}),
        gpu_seconds=outcome.get("gpu_seconds", 0.0),
        round=outcome.get("round", 0),
        meta=outcome.get("meta", {}),
    )


def measured_winners(arch: str, *, top: int) -> list[tuple[EngineProblem, CandidateRecord]]:
    """The best ``top`` measured candidates of every problem on ``arch``, in any campaign: what
    a transfer proposer (engine.propose.proposers.TransferProposer) starts from. One query,
    ranked in the database, however many candidates there are."""
    rows = (
        Candidate.objects.filter(
            problem__arch=arch,
            status=Candidate.Status.DONE,
            reward__isnull=False,
            outcome__isnull=False,
        )
        .exclude(proposer="llm")  # a model's own source: its knobs do not rebuild it
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("problem_id")], order_by=F("reward").desc())
        )
        .filter(rank__lte=top)
        .select_related("problem")
        # each compile step asks: not the rendered sources and logs, which the record never uses
        .defer("source", "compile_result", "verification_result", "timings")
    )
    return [(row.problem.as_engine(), record_from_row(row, None)) for row in rows]


class DjangoStorage:
    """CampaignStorage for one Campaign row."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign

    # -- helpers ---------------------------------------------------------------------------
    def _check(self, name: str) -> None:
        if name != self.campaign.name:
            raise ValueError(f"this storage holds campaign {self.campaign.name!r}, not {name!r}")

    def problem_row(self, problem_key: str) -> Problem:
        shape, _, layout = problem_key.rpartition("_")
        p = EngineProblem.parse(shape, layout)
        return Problem.objects.get(
            campaign=self.campaign, m=p.m, n=p.n, k=p.k, layout=p.layout.value
        )

    # -- the protocol ----------------------------------------------------------------------
    def open_campaign(self, name: str, settings: Mapping[str, Any]) -> None:
        """The row exists already (campaign_create); a queued one starts running."""
        self._check(name)
        Campaign.objects.filter(id=self.campaign.id, status=Campaign.Status.QUEUED).update(
            status=Campaign.Status.RUNNING
        )

    def add_problem(self, campaign: str, problem: EngineProblem) -> None:
        self._check(campaign)
        Problem.objects.get_or_create(
            campaign=self.campaign,
            m=problem.m,
            n=problem.n,
            k=problem.k,
            layout=problem.layout.value,
        )

    def set_problem_status(self, campaign: str, problem_key: str, status: str) -> None:
        self._check(campaign)
        row = self.problem_row(problem_key)
        if status in ("pending", "queued"):
            row.status, row.stopped = Problem.Status.QUEUED, ""
        elif status == "running":
            row.status, row.stopped = Problem.Status.RUNNING, ""
        elif status in FAILED_REASONS:
            row.status, row.stopped = Problem.Status.FAILED, status
        else:  # a stop reason: budget, exhausted, no_improvement, converged, gpu_budget
            row.status, row.stopped = Problem.Status.DONE, status
        row.save(update_fields=["status", "stopped", "updated"])

    def problem_status(self, campaign: str, problem_key: str) -> str | None:
        self._check(campaign)
        try:
            row = self.problem_row(problem_key)
        except Problem.DoesNotExist:
            return None
        if row.stopped:
            return row.stopped
        return {Problem.Status.QUEUED: "pending"}.get(row.status, row.status)

    def candidates(self, campaign: str, problem_key: str) -> list[CandidateRecord]:
        """Recorded candidates (in-flight ones, outcome null, are left out), oldest first."""
        self._check(campaign)
        rows = (
            Candidate.objects.filter(problem=self.problem_row(problem_key), outcome__isnull=False)
            .select_related("parent")
            .order_by("id")
        )
        return [record_from_row(r, r.parent.name if r.parent else None) for r in rows]

    @transaction.atomic
    def record(self, campaign: str, problem_key: str, records: Sequence[CandidateRecord]) -> None:
        self._check(campaign)
        problem = self.problem_row(problem_key)
        names = [r.name for r in records] + [r.parent for r in records if r.parent]
        existing = {
            c.name: c
            for c in Candidate.objects.select_for_update().filter(problem=problem, name__in=names)
        }
        for record in records:
            row = existing.get(record.name)
            if row is not None and row.outcome is not None:
                raise ValueError(f"{problem_key}: candidate {record.name} is already recorded")
            status, compile_status = candidate_status(record)
            fields: dict[str, Any] = {
                "family": record.family,
                "config": dict(record.knobs),
                "proposer": record.proposer,
                "status": status,
                "compile_status": compile_status,
                "timings": candidate_timings(record),
                # no reward for a failure the recording harness caused (webapp.campaigns.failures)
                "reward": record.reward
                if math.isfinite(record.reward) and not harness_failed(record)
                else None,
                "failure_reason": ""
                if record.status == CandidateStatus.OK
                else record.message or record.reason,
                "outcome": record_json(record),
                "verification_result": {
                    "ok": record.status == CandidateStatus.OK,
                    "reason": record.reason or record.status,
                    "message": record.message,
                },
            }
            if record.parent and record.parent in existing:
                fields["parent"] = existing[record.parent]
            if row is None:
                # a model-written candidate (engine.llm) carries its source; a config renders it
                source = record.source or source_of(record.family, record.knobs)
                row = Candidate.objects.create(
                    problem=problem,
                    name=record.name,
                    source=source,
                    source_hash=source_hash(source),
                    **fields,
                )
                existing[record.name] = row
            else:
                for key, value in fields.items():
                    setattr(row, key, value)
                row.save()
        problem_refresh_best(problem=problem)
