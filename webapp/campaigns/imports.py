"""Importing recorded GPU runs (bench/results/*/families-run*.json) as campaigns.

A family-sweep report holds ``configs`` (name → family, layout, knobs, compile and verification
outcome) and ``sweep`` (one entry per shape and layout: median seconds per runner in the device
protocol, the baselines among them as ``<baseline>_<variant>``, and the GPU environment). Every
number stored here comes from the report; nothing is invented. Sources were not recorded, so
imported candidates have an empty source and their ``source_hash`` is the sha256 of their
procedural name (the name is the natural key, see STYLE.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from engine.problem import Problem as EngineProblem
from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Layout, Problem
from webapp.campaigns.ratios import problem_refresh_best
from webapp.workers.models import GpuEnvironment

BASELINES = [b.value for b in BaselineResult.Baseline]
REWARD_BASELINE = BaselineResult.Baseline.CUBLASLT_AUTOTUNE.value
IMPORT_PROTOCOL = "device"  # the sweep times everything with the device protocol
IMPORT_PROPOSER = "uniform-sample"  # the families sweep samples configs uniformly


class ReportError(ValueError):
    """The report is not a family-sweep report this importer understands."""


@dataclass(frozen=True)
class ImportSummary:
    campaign: Campaign
    problems: int
    candidates: int
    baselines: int


def name_hash(name: str) -> str:
    """The source_hash of a candidate whose source was not recorded."""
    return hashlib.sha256(name.encode()).hexdigest()


def cublas_version_text(raw: str) -> str:
    """cuBLASLt reports 130100 for 13.1.0; other text is kept as recorded."""
    if raw.isdigit() and len(raw) >= 5:
        value = int(raw)
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return raw


def cublaslt_version_number(text: str) -> str:
    """cublas_version_text undone: 13.1.0 → 130100, as cuBLASLt reports it; other text is kept."""
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return text
    major, minor, patch = map(int, parts)
    return str(major * 10000 + minor * 100 + patch) if minor < 100 and patch < 100 else text


def best_baseline_seconds(seconds: dict[str, float]) -> dict[str, float]:
    """Baseline name → its time as the engine states it (engine.timing.baselines.best_of_layouts:
    the faster of its NN/TN calls, cuBLASLt-autotune never slower than the heuristic's pick)."""
    from engine.timing.baselines import best_of_layouts  # imports torch: not in the web process

    return {b: v["seconds"] for b, v in best_of_layouts(seconds).items()}


def reward_for(*, seconds: float, baseline_best: dict[str, float]) -> float | None:
    """log(cuBLASLt-autotune best / candidate time); > 0 means the candidate wins."""
    reference = baseline_best.get(REWARD_BASELINE)
    if reference is None or seconds <= 0 or reference <= 0:
        return None
    return math.log(reference / seconds)


def environment_record(env: dict[str, Any]) -> GpuEnvironment:
    environment, _ = GpuEnvironment.objects.get_or_create(
        name=env.get("gpu_name", "unknown"),
        arch=env.get("arch", ""),
        driver_version=env.get("driver", ""),
        cuda_version=env.get("cuda_runtime", ""),
        cublas_version=cublas_version_text(str(env.get("cublaslt_version", ""))),
        cutlass_version=env.get("cutlass_version", ""),
        defaults={"clocks": env.get("clocks", {})},
    )
    return environment


def candidate_status(config: dict[str, Any]) -> tuple[str, str, str]:
    """(status, compile_status, failure_reason) from a config's recorded outcome."""
    if not config.get("compile_ok", True):
        return Candidate.Status.FAILED, Candidate.CompileStatus.ERROR, "compile failed"
    if config.get("verify") != "ok":
        reason = config.get("message") or str(config.get("verify"))
        return Candidate.Status.REJECTED, Candidate.CompileStatus.OK, reason
    return Candidate.Status.DONE, Candidate.CompileStatus.OK, ""


def candidate_fields(
    *,
    name: str,
    config: dict[str, Any],
    median_s: float | None,
    baselines: dict[str, float],
    environment: GpuEnvironment,
    source_label: str,
) -> dict[str, Any]:
    status, compile_status, failure = candidate_status(config)
    timings = {}
    if median_s is not None:
        timings[IMPORT_PROTOCOL] = {
            "median_s": median_s,
            "baselines": baselines,  # timed in the same sweep process as the kernel
            "session": "sweep",
            "gpu_environment": environment.id,
            "recorded_in": source_label,
        }
    return {
        "name": name,
        "family": config.get("family", ""),
        "config": config.get("knobs", {}),
        "source": "",
        "proposer": IMPORT_PROPOSER,
        "compile_status": compile_status,
        "compile_result": {
            "ok": config.get("compile_ok", True),
            "seconds": config.get("compile_s"),
            "registers": config.get("registers"),
            "error": config.get("compile_error"),
        },
        "verification_result": {
            "ok": config.get("verify") == "ok",
            "reason": config.get("verify"),
            "message": config.get("message", ""),
            "verified_at": config.get("verified_at"),
            "checks": config.get("checks", []),
        },
        "timings": timings,
        "reward": None
        if median_s is None
        else reward_for(seconds=median_s, baseline_best=baselines),
        "status": status,
        "failure_reason": failure,
    }


def validate_report(report: Any) -> None:
    if not isinstance(report, dict) or not isinstance(report.get("configs"), dict):
        raise ReportError("not a family-sweep report: no 'configs' object")
    if not isinstance(report.get("sweep"), list) or not report["sweep"]:
        raise ReportError("not a family-sweep report: no 'sweep' entries")


@transaction.atomic
def campaign_import_report(
    *, report: dict[str, Any], owner: AbstractBaseUser, name: str, source_label: str
) -> ImportSummary:
    """Creates or updates the campaign called ``name`` from a family-sweep report.

    Idempotent: problems are keyed by shape and layout, candidates by (problem, name hash),
    baselines by (shape, layout, baseline, variant, environment); a re-import updates them.
    """
    validate_report(report)
    configs: dict[str, dict[str, Any]] = report["configs"]
    campaign, _ = Campaign.objects.update_or_create(
        name=name,
        owner=owner,
        defaults={
            "status": Campaign.Status.DONE,
            "layout": Layout.NN,
            "reward_protocol": IMPORT_PROTOCOL,
            "budget_per_shape": len(configs),
            "proposer_mix": {IMPORT_PROPOSER: 1.0},
        },
    )
    counts = {"problems": 0, "candidates": 0, "baselines": 0}
    for entry in report["sweep"]:
        shape, _, layout = str(entry["problem"]).partition("_")
        engine_problem = EngineProblem.parse(shape, layout or "nn")
        seconds: dict[str, float] = entry["seconds"]
        baselines = best_baseline_seconds(seconds)
        environment = environment_record(entry.get("environment", {}))
        problem, _ = Problem.objects.update_or_create(
            campaign=campaign,
            m=engine_problem.m,
            n=engine_problem.n,
            k=engine_problem.k,
            layout=engine_problem.layout.value,
            defaults={"status": Problem.Status.DONE},
        )
        counts["problems"] += 1
        counts["baselines"] += import_baselines(problem, seconds, environment)
        for config_name, config in configs.items():
            if config_name not in seconds:
                continue  # not timed at this shape (other layout, or illegal here)
            median_s = seconds[config_name]
            Candidate.objects.update_or_create(
                problem=problem,
                source_hash=name_hash(config_name),
                defaults=candidate_fields(
                    name=config_name,
                    config=config,
                    median_s=median_s,
                    baselines=baselines,
                    environment=environment,
                    source_label=source_label,
                ),
            )
            counts["candidates"] += 1
        problem_refresh_best(problem=problem)
    return ImportSummary(campaign=campaign, **counts)


def import_baselines(
    problem: Problem,
    seconds: dict[str, float],
    environment: GpuEnvironment,
    *,
    protocol: str = IMPORT_PROTOCOL,
    kernels: Mapping[str, str] | None = None,
    **details: Any,
) -> int:
    """Stores each ``<baseline>_<variant>`` time of ``seconds`` as the baseline's ``protocol``
    timing on ``environment`` (other protocols' timings of the row are kept), with the kernel
    the library ran where ``kernels`` names it (``cublaslt_autotune_nn`` → its label)."""
    count = 0
    for baseline in BASELINES:
        for variant in ("nn", "tn"):
            key = f"{baseline}_{variant}"
            if key not in seconds:
                continue
            row, _ = BaselineResult.objects.get_or_create(
                m=problem.m,
                n=problem.n,
                k=problem.k,
                layout=problem.layout,
                baseline=baseline,
                variant=variant,
                gpu_environment=environment,
            )
            timing = {"median_s": seconds[key], **details}
            if kernels and kernels.get(key):
                timing["kernel"] = kernels[key]
            row.timings = {**row.timings, protocol: timing}
            row.save(update_fields=["timings"])
            count += 1
    return count
