"""Importing a campaign database the engine wrote (``python -m engine optimize --db X.sqlite``).

The file is an engine.campaign.storage.SqliteStorage: campaigns, their problems and every
CandidateRecord. Each engine campaign becomes the Campaign row of the same name (DjangoStorage
needs the names to match), and its records are stored through DjangoStorage.record, so a recorded
campaign lands in the dashboard exactly as a live one would. The file itself is only read: the
engine opens a private copy.

The engine's ``--out`` report beside the database (any ``*.json`` there whose settings name the
campaign) adds its ``final`` section: each shape's top kernels re-measured in a fresh process
against the four baselines in both layouts, with the GPU environment. The baselines become
BaselineResult rows (which the shape and candidate pages divide by), the top kernels' times go
into their timings. Without that report the pages show the search's own per-candidate baselines
only.

Re-importing is idempotent: the campaign is found by (name, owner), a problem by its shape,
records already stored are skipped, and the final section is written again in place.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from engine.campaign.storage import SqliteStorage
from engine.codegen.library import LIBRARIES, library
from engine.outcomes import CandidateRecord
from engine.problem import Layout as EngineLayout
from engine.problem import Problem as EngineProblem
from engine.timing.baseline_names import tuned_label
from engine.timing.baselines import best_of_layouts
from engine.timing.ratios import baseline_runner, with_quartiles
from webapp.campaigns.imports import BASELINES, environment_record, import_baselines
from webapp.campaigns.models import Campaign, Candidate, Layout, Problem
from webapp.campaigns.ratios import problem_refresh_best
from webapp.campaigns.storage import DjangoStorage

SQLITE_HEADER = b"SQLite format 3\x00"
DATABASE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
CAMPAIGN_TABLES = ("campaigns", "problems", "candidates")
UNFINISHED = (None, "pending", "running")  # an interrupted session leaves its problem running
REPORT_MAX_BYTES = 64 * 2**20
BASELINE_KEYS = {f"{b}_{v}" for b in BASELINES for v in ("nn", "tn")}


class CampaignDatabaseError(ValueError):
    """The file is not an engine campaign database this importer can read."""


@dataclass(frozen=True)
class DatabaseImportSummary:
    campaign: Campaign
    problems: int
    candidates: int  # stored for the campaign after the import
    added: int  # of them, recorded by this import
    baselines: int  # baseline timings from the final section


def looks_like_database(path: Path) -> bool:
    """An SQLite file by its suffix or, whatever its name, by its header."""
    if path.suffix.lower() in DATABASE_SUFFIXES:
        return True
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


@contextmanager
def engine_database(path: Path) -> Iterator[SqliteStorage]:
    """A private copy of the campaign database at ``path``, opened as the engine's storage."""
    if not path.is_file():
        raise CampaignDatabaseError("no such file")
    source = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        try:
            rows = source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {name for (name,) in rows}
        except sqlite3.DatabaseError as exc:
            raise CampaignDatabaseError(f"not an SQLite database ({exc})") from exc
        missing = [t for t in CAMPAIGN_TABLES if t not in tables]
        if missing:
            raise CampaignDatabaseError(
                f"not an engine campaign database (no table {', '.join(missing)})"
            )
        with tempfile.TemporaryDirectory(prefix="gemmforge-import-") as tmp:
            copy_path = Path(tmp) / "campaign.sqlite"
            copy = sqlite3.connect(copy_path)
            source.backup(copy)
            copy.close()
            storage = SqliteStorage(copy_path)
            try:
                yield storage
            finally:
                storage.close()
    finally:
        source.close()


def final_sections(path: Path) -> dict[str, dict[str, Any]]:
    """Campaign name → problem key → final re-measurement, from the reports beside ``path``."""
    found: dict[str, dict[str, Any]] = {}
    for report_path in sorted(path.parent.glob("*.json")):
        try:
            if report_path.stat().st_size > REPORT_MAX_BYTES:
                continue
            report = json.loads(report_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict) or not isinstance(report.get("settings"), dict):
            continue
        name, final = report["settings"].get("name"), report.get("final")
        if isinstance(name, str) and isinstance(final, dict):
            found.setdefault(name, {}).update(final)
    return found


def reward_protocol(records: Sequence[CandidateRecord]) -> str:
    """The protocol whose time is the records' primary one (their ``seconds``)."""
    for record in records:
        if record.seconds is None:
            continue
        for protocol, entry in record.timings.items():
            if isinstance(entry, Mapping) and entry.get("seconds") == record.seconds:
                return protocol
    return "device"


def search_space(settings: Mapping[str, Any], records: Sequence[CandidateRecord]) -> str:
    """The stored setting; else "library" when every config tried is a library config."""
    if settings.get("space") in Campaign.SearchSpace.values:
        return str(settings["space"])
    configs = [r for r in records if r.family != "llm"]  # model-written sources are in neither
    names = {c.name for f in LIBRARIES for layout in EngineLayout for c in library(f, layout)}
    if configs and all(r.name in names for r in configs):
        return Campaign.SearchSpace.LIBRARY
    return Campaign.SearchSpace.FULL


def campaign_fields(
    settings: Mapping[str, Any],
    problems: Sequence[EngineProblem],
    records: Sequence[CandidateRecord],
) -> dict[str, Any]:
    layouts = {p.layout.value for p in problems}
    return {
        "status": Campaign.Status.DONE,
        "layout": layouts.pop() if len(layouts) == 1 else Layout.NN,
        "budget_per_shape": max(1, int(settings.get("budget") or 1)),
        "proposer_mix": dict(settings.get("mix") or {}),
        "reward_protocol": reward_protocol(records),
        "search_space": search_space(settings, records),
    }


def campaign_import_database(
    *, path: Path, owner: AbstractBaseUser, campaign: str | None = None
) -> list[DatabaseImportSummary]:
    """Imports every campaign of the engine database at ``path`` (or only ``campaign``)."""
    finals = final_sections(path)
    with engine_database(path) as engine:
        try:
            names = engine.campaign_names()
            if not names:
                raise CampaignDatabaseError("it holds no campaign")
            if campaign is not None:
                if campaign not in names:
                    raise CampaignDatabaseError(
                        f"no campaign {campaign!r} in it; it holds {', '.join(map(repr, names))}"
                    )
                names = [campaign]
            return [
                campaign_import_engine(
                    engine=engine, name=name, owner=owner, final=finals.get(name, {})
                )
                for name in names
            ]
        except sqlite3.Error as exc:
            raise CampaignDatabaseError(f"cannot read its campaigns ({exc})") from exc
        except KeyError as exc:  # e.g. a family this checkout does not know renders no source
            raise CampaignDatabaseError(f"cannot store its candidates ({exc})") from exc


@transaction.atomic
def campaign_import_engine(
    *, engine: SqliteStorage, name: str, owner: AbstractBaseUser, final: Mapping[str, Any]
) -> DatabaseImportSummary:
    """Creates or updates the campaign ``name`` from the engine storage ``engine``."""
    problems = engine.problems(name)
    records = {p.key: engine.candidates(name, p.key) for p in problems}
    every_record = [r for rs in records.values() for r in rs]
    row, _ = Campaign.objects.update_or_create(
        name=name,
        owner=owner,
        defaults=campaign_fields(engine.campaign_settings(name) or {}, problems, every_record),
    )
    storage = DjangoStorage(row)
    added = 0
    for problem in problems:
        storage.add_problem(name, problem)
        status = engine.problem_status(name, problem.key)
        # nothing runs it now: an unfinished problem is waiting, as the engine would resume it
        storage.set_problem_status(name, problem.key, "pending" if status in UNFINISHED else status)
        stored = {r.name for r in storage.candidates(name, problem.key)}
        new = [r for r in records[problem.key] if r.name not in stored]
        if new:
            storage.record(name, problem.key, new)
            added += len(new)
    return DatabaseImportSummary(
        campaign=row,
        problems=len(problems),
        candidates=Candidate.objects.filter(problem__campaign=row).count(),
        added=added,
        baselines=import_final(campaign=row, final=final),
    )


def import_final(*, campaign: Campaign, final: Mapping[str, Any]) -> int:
    """The final re-measurement: baseline timings per protocol, and the top kernels' times."""
    count = 0
    problems = {str(p): p for p in campaign.problems.all()}
    for key, section in final.items():
        problem = problems.get(key)
        if problem is None or not isinstance(section, Mapping):
            continue
        import_final_verdicts(problem=problem, section=section)
        if not isinstance(section.get("environment"), Mapping):
            problem_refresh_best(problem=problem)
            continue  # a baseline time means nothing without the GPU it was taken on
        environment = environment_record(dict(section["environment"]))
        for protocol, result in (section.get("protocols") or {}).items():
            seconds = dict(result.get("seconds") or {})
            statistic = result.get("statistic", "median")
            count += import_baselines(
                problem,
                seconds,
                environment,
                protocol=protocol,
                kernels={**cublaslt_kernel_labels(section), **torch_baseline_labels(section)},
                statistic=statistic,
            )
            kernels = {n: s for n, s in seconds.items() if n not in BASELINE_KEYS}
            rejected = set(result.get("rejected_while_timed") or ())
            # the baselines of this very session, by the rule the engine's summary used, with
            # each runner's interquartile range where the final kept it
            kept = dict(result.get("quartiles") or {})
            baselines = {
                b: with_quartiles(v["seconds"], baseline_runner(b, v), kept)
                for b, v in best_of_layouts(seconds).items()
            }
            baselines = {b: t if len(t) > 1 else t["seconds"] for b, t in baselines.items()}
            for candidate in Candidate.objects.filter(problem=problem, name__in=kernels):
                if candidate.name in rejected:
                    continue  # wrong values while timed: its time is no result
                entry = dict(candidate.timings.get(protocol) or {})
                for stale in ("final_s", "final_statistic", "final_gpu_environment"):
                    entry.pop(stale, None)  # written by earlier imports, before "final"
                # the final's own session: its kernel time beside the baselines it timed
                entry["final"] = {
                    "seconds": kernels[candidate.name],
                    **(kept.get(candidate.name) or {}),
                    "statistic": statistic,
                    "baselines": baselines,
                    "gpu_environment": environment.id,
                }
                candidate.timings = {**candidate.timings, protocol: entry}
                candidate.save(update_fields=["timings"])
        problem_refresh_best(problem=problem)
    return count


def import_final_verdicts(*, problem: Problem, section: Mapping[str, Any]) -> None:
    """What the final said of each top kernel it names, kept on the candidate's
    ``verification_result``: its compute-sanitizer verdict (``sanitize``), its rejection while
    timed (``final_rejection``) and the final's error (``final_error``: e.g. "no top kernel
    passed"). A kernel that failed the sanitizer or was rejected is REJECTED, so it never
    becomes the shape's best; the bundle reads the verdicts (webapp.campaigns.artifacts)."""
    from engine.publish.bundle import final_rejections

    sanitize = section.get("sanitize")
    sanitize = (
        {n: v for n, v in sanitize.items() if isinstance(v, Mapping)}
        if isinstance(sanitize, Mapping)
        else {}
    )
    rejected = final_rejections(section)
    error = section.get("error")
    for candidate in Candidate.objects.filter(problem=problem, name__in=[*sanitize, *rejected]):
        verification = dict(candidate.verification_result or {})
        verdict = sanitize.get(candidate.name)
        why = ""
        if verdict is not None:
            verification["sanitize"] = dict(verdict)
            if not verdict.get("ok"):
                message = verdict.get("message")
                why = f"compute-sanitizer: {verdict.get('reason', 'failed')}"
                why += f": {message}" if message else ""
        if candidate.name in rejected:
            verification["final_rejection"] = rejected[candidate.name]
            why = why or f"rejected in the finals: {rejected[candidate.name]}"
        if isinstance(error, str) and error:
            verification["final_error"] = error
        candidate.verification_result = verification
        fields = ["verification_result"]
        if why:
            candidate.status, candidate.failure_reason = Candidate.Status.REJECTED, why
            fields += ["status", "failure_reason"]
        candidate.save(update_fields=fields)


def torch_baseline_labels(section: Mapping[str, Any]) -> dict[str, str]:
    """``inductor_max_autotune_<layout>`` and ``tunableop_<layout>`` → what it ran (Inductor's
    pick, TunableOp's kernels), from a final's ``torch_baselines`` (engine.execution.final)."""
    labels: dict[str, str] = {}
    for runner, report in (section.get("torch_baselines") or {}).items():
        if isinstance(report, Mapping) and (label := tuned_label(dict(report))):
            labels[str(runner)] = label
    return labels


def cublaslt_kernel_labels(section: Mapping[str, Any]) -> dict[str, str]:
    """``cublaslt_autotune_<layout>`` and ``cublaslt_heuristic_<layout>`` → the label of the
    kernel it ran, from a final's ``cublaslt_kernels`` (engine.execution.final)."""
    labels: dict[str, str] = {}
    for runner, pair in (section.get("cublaslt_kernels") or {}).items():
        if not isinstance(pair, Mapping) or not runner.startswith("cublaslt_autotune_"):
            continue
        layout = runner.removeprefix("cublaslt_autotune_")
        for which, baseline in (
            ("autotune", "cublaslt_autotune"),
            ("heuristic", "cublaslt_heuristic"),
        ):
            kernel = pair.get(which)
            if isinstance(kernel, Mapping) and kernel.get("label"):
                labels[f"{baseline}_{layout}"] = str(kernel["label"])
    return labels
