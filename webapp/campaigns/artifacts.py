"""What the candidate page and the downloads make from stored records: the compile report (ptxas
resources per kernel), a shape's best kernel source, and the campaign's kernel bundle.

The bundle is engine.publish.bundle.build_bundle's, as `engine bundle` makes it, over the
campaign's records and the verdicts its finals left (webapp.campaigns.finals: imported, or run by
a live campaign's finals steps).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from django.utils.text import slugify

from engine.codegen import get_family
from engine.compilation.compile import KernelResources, parse_ptxas
from engine.compilation.source_kernel import FAMILY as LLM_FAMILY
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.publish.bundle import BundleKernel, CampaignResults, build_bundle, final_algos
from engine.timing.ratios import Session
from webapp.campaigns.imports import cublaslt_version_number
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.campaigns.storage import record_from_row

RESOURCE_COLUMNS = ("registers", "shared_bytes", "stack_bytes", "spill_stores_bytes")


# -- compile report ----------------------------------------------------------------------------
def compile_report(compile_result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compile record as the candidate page shows it; None when nothing was recorded.

    ``kernels``: one row per entry function and arch, from the record's ``resources`` or, when it
    has none, parsed from its log with engine.compilation.compile.parse_ptxas; ``source`` says
    which.
    """
    if not compile_result:
        return None
    log = compile_result.get("log") or ""
    resources: list[KernelResources] = []
    source = ""
    for item in compile_result.get("resources") or ():
        try:
            resources.append(KernelResources.from_dict(item))
        except (TypeError, KeyError, AttributeError):
            continue
    if resources:
        source = "record"
    elif log:
        resources = list(parse_ptxas(log))
        source = "log" if resources else ""
    kernels = [
        {
            "name": r.name,
            "arch": r.arch,
            "registers": r.registers,
            "shared_bytes": r.shared_bytes,
            "stack_bytes": r.stack_bytes,
            "spill_stores_bytes": r.spill_stores_bytes,
            "spill_loads_bytes": r.spill_loads_bytes,
            "spills": r.spills,
        }
        for r in resources
    ]
    facts = [
        (label, compile_result.get(key))
        for key, label in (
            ("ok", "built"),
            ("seconds", "seconds"),
            ("registers", "registers (recorded)"),
            ("archs", "archs"),
            ("cached", "cached"),
            ("error", "error"),
        )
        if compile_result.get(key) not in (None, "", [])
    ]
    return {
        "facts": facts,
        "command": compile_result.get("command") or "",
        "log": log,
        "kernels": kernels,
        "resources_from": source,
    }


# -- a shape's best kernel ---------------------------------------------------------------------
def best_verified(*, problem: Problem) -> Candidate | None:
    """The shape's chosen kernel (webapp.campaigns.ratios): verified and timed beside the
    baselines in one session; None before one is."""
    candidate_id = (problem.best or {}).get("candidate")
    if candidate_id is None:
        return None
    return Candidate.objects.filter(
        id=candidate_id, problem=problem, status=Candidate.Status.DONE
    ).first()


def family_config(candidate: Candidate, problem: Problem) -> Any:
    """The engine config behind the candidate (its family's from_knobs, layout of the shape)."""

    return get_family(candidate.family).from_knobs(
        {**(candidate.config or {}), "layout": problem.layout}
    )


def kernel_source(candidate: Candidate) -> str:
    """The stored source, or (imported records have none) the one its family renders."""
    if candidate.source:
        return candidate.source
    return family_config(candidate, candidate.problem).render()


def kernel_file_name(*, candidate: Candidate) -> str:
    """e.g. gemmforge-shape-13-4096x4096x4096-nn-hgemm_sm90_....cu (ASCII only)."""
    problem = candidate.problem
    kernel = slugify(candidate.name).replace("-", "_")[:120] or f"candidate_{candidate.id}"
    return f"gemmforge-shape-{problem.id}-{problem.shape}-{problem.layout}-{kernel}.cu"


# -- the campaign's kernel bundle --------------------------------------------------------------
def bundle_file_name(*, campaign: Campaign, include_slower: bool) -> str:
    slug = slugify(campaign.name)[:60].strip("-") or "campaign"
    suffix = "-all" if include_slower else ""
    return f"gemmforge-campaign-{campaign.id}-{slug}-bundle{suffix}.zip"


def bundle_records(*, problem: Problem, protocol: str) -> list[CandidateRecord]:
    """The shape's candidates as the engine's records (what `engine bundle` reads from its
    database): a recorded candidate's own record (engine.outcomes), a model-written one with its
    source; an imported sweep's, which has none, made from its search timing in ``protocol``."""
    return rows_records(Candidate.objects.filter(problem=problem).order_by("id"), protocol)


def rows_records(rows: Iterable[Candidate], protocol: str) -> list[CandidateRecord]:
    """Candidate rows as the engine's records (:func:`bundle_records`), in their order."""
    records = []
    for row in rows:
        if row.outcome is not None:
            record = record_from_row(row, None)
            if row.family == LLM_FAMILY and row.source:
                record = replace(record, source=row.source)
            records.append(record)
            continue
        timing = (row.timings or {}).get(protocol) or {}
        ok = row.status == Candidate.Status.DONE and timing.get("median_s")
        records.append(
            CandidateRecord(
                name=row.name,
                family=row.family,
                knobs=row.config or {},
                proposer=row.proposer,
                status=CandidateStatus.OK if ok else CandidateStatus.REJECTED,
                reward=row.reward if row.reward is not None else -math.inf,
                seconds=timing.get("median_s") if ok else None,
                baselines=dict(timing.get("baselines") or {}) if ok else {},
            )
        )
    return records


def campaign_results(*, campaign: Campaign) -> CampaignResults:
    """The campaign as engine.publish.bundle.build_bundle reads it: its records, and what its
    finals left on the candidates and shapes (webapp.campaigns.finals): the final sessions, the
    kernels the finals rejected and the cuBLASLt algorithms autotune picked."""
    from webapp.campaigns.ratios import HEADLINE_PROTOCOL, candidate_sessions

    problems = list(campaign.problems.order_by("id"))
    keys = {p.id: p.as_engine().key for p in problems}
    environment = bundle_environment(campaign=campaign)
    gpu = str(environment.get("gpu_name", ""))  # a session names its environment by row id
    rejected: dict[str, dict[str, str]] = {}
    finals: dict[str, dict[str, Session]] = {}
    by_problem: dict[int, list[Candidate]] = {p.id: [] for p in problems}
    # one query for the whole campaign: a page of 1 000 shapes is not 1 000 queries
    for row in Candidate.objects.filter(problem__campaign=campaign).order_by("problem_id", "id"):
        by_problem[row.problem_id].append(row)
        key = keys[row.problem_id]
        why = (row.verification_result or {}).get("final_rejection")
        if isinstance(why, str):
            rejected.setdefault(key, {})[row.name] = why
        for session in candidate_sessions(row.timings or {}, HEADLINE_PROTOCOL):
            if session.name == "final":
                finals.setdefault(key, {})[row.name] = dataclasses.replace(session, environment=gpu)
    engine_problems = tuple(p.as_engine() for p in problems)
    # final_algos reads a shape's final section: the part the finals left on the problem
    picked = {keys[p.id]: {"cublaslt_kernels": p.cublaslt_kernels} for p in problems}
    return CampaignResults(
        title=campaign.name,
        problems=engine_problems,
        records={
            keys[problem_id]: rows_records(rows, campaign.reward_protocol)
            for problem_id, rows in by_problem.items()
        },
        environment=environment,
        rejected_in_finals=rejected,
        final_sessions=finals,
        cublaslt_algos=final_algos(engine_problems, picked),
    )


def sanitized_verdicts(*, campaign: Campaign) -> Callable[[BundleKernel], bool]:
    """Whether a bundle kernel passed compute-sanitizer in the campaign's finals (imported, or
    run by its finals steps: webapp.campaigns.finals)."""
    rows = Candidate.objects.filter(
        problem__campaign=campaign, verification_result__sanitize__ok=True
    ).select_related("problem")
    passed = {(row.problem.as_engine().key, row.name) for row in rows.only("name", "problem")}
    return lambda kernel: (kernel.problem.key, kernel.name) in passed


NO_BUNDLE = "no shape has a verified kernel timed beside the baselines yet"


def bundle_unavailable(*, campaign: Campaign) -> str:
    """Why the campaign offers no bundle (NO_BUNDLE), or "" when it offers one."""
    return "" if campaign.problems.exclude(best={}).exists() else NO_BUNDLE


def bundle_environment(*, campaign: Campaign) -> dict[str, Any]:
    from webapp.campaigns.selectors import campaign_environments

    env = campaign_environments(campaign=campaign).first()
    if env is None:
        return {}
    return {
        "gpu_name": env.name,
        "arch": env.arch,
        "driver": env.driver_version,
        "cuda": env.cuda_version,
        "cublas": env.cublas_version,
        # as the engine records it (130100): the version a pinned algorithm names
        "cublaslt_version": cublaslt_version_number(env.cublas_version),
        "cutlass": env.cutlass_version,
    }


def campaign_bundle(*, campaign: Campaign, include_slower: bool = False) -> IO[bytes]:
    """The bundle zip (engine.publish.bundle.build_bundle, as `engine bundle` makes it) in a
    temporary file (rewound; closed by whoever streams it). Raises BundleError."""
    with tempfile.TemporaryDirectory(prefix="gemmforge-bundle-") as folder:
        path = Path(folder) / "bundle.zip"
        build_bundle(
            campaign_results(campaign=campaign),
            path,
            include_slower=include_slower,
            admissible=sanitized_verdicts(campaign=campaign),
        )
        out = tempfile.TemporaryFile()  # noqa: SIM115 (the response streams and closes it)
        with path.open("rb") as zipped:
            while chunk := zipped.read(1 << 20):
                out.write(chunk)
    out.seek(0)
    return out
