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
into their timings, the sanitizer verdicts onto the candidates (webapp.campaigns.finals, as a
live campaign's finals). Without that report the pages show the search's own per-candidate
baselines only.

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
from webapp.campaigns.finals import problem_apply_final
from webapp.campaigns.models import Campaign, Candidate, Layout
from webapp.campaigns.storage import DjangoStorage

SQLITE_HEADER = b"SQLite format 3\x00"
DATABASE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
CAMPAIGN_TABLES = ("campaigns", "problems", "candidates")
UNFINISHED = (None, "pending", "running")  # an interrupted session leaves its problem running
REPORT_MAX_BYTES = 64 * 2**20


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


def engine_reports(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Campaign name → the engine's --out reports beside ``path`` that name it, in file-name
    order (what is not such a report, or is too large to be one, is passed over)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for report_path in sorted(path.parent.glob("*.json")):
        try:
            if report_path.stat().st_size > REPORT_MAX_BYTES:
                continue
            report = json.loads(report_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict) or not isinstance(report.get("settings"), dict):
            continue
        name = report["settings"].get("name")
        if isinstance(name, str):
            found.setdefault(name, []).append(report)
    return found


def final_sections(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Problem key → final re-measurement, over a campaign's reports (a later one's wins)."""
    found: dict[str, Any] = {}
    for report in reports:
        if isinstance(final := report.get("final"), dict):
            found.update(final)
    return found


def felt_times(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The last of a campaign's reports' ``throughput`` (what its run's user felt); {} without."""
    found = [r["throughput"] for r in reports if isinstance(r.get("throughput"), dict)]
    return dict(found[-1]) if found else {}


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
    reports = engine_reports(path)
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
                    engine=engine,
                    name=name,
                    owner=owner,
                    final=final_sections(reports.get(name, [])),
                    times=felt_times(reports.get(name, [])),
                )
                for name in names
            ]
        except sqlite3.Error as exc:
            raise CampaignDatabaseError(f"cannot read its campaigns ({exc})") from exc
        except KeyError as exc:  # e.g. a family this checkout does not know renders no source
            raise CampaignDatabaseError(f"cannot store its candidates ({exc})") from exc


@transaction.atomic
def campaign_import_engine(
    *,
    engine: SqliteStorage,
    name: str,
    owner: AbstractBaseUser,
    final: Mapping[str, Any],
    times: Mapping[str, Any] | None = None,
) -> DatabaseImportSummary:
    """Creates or updates the campaign ``name`` from the engine storage ``engine``; ``times``:
    its run's throughput, from its report."""
    problems = engine.problems(name)
    records = {p.key: engine.candidates(name, p.key) for p in problems}
    every_record = [r for rs in records.values() for r in rs]
    fields = campaign_fields(engine.campaign_settings(name) or {}, problems, every_record)
    row, _ = Campaign.objects.update_or_create(
        name=name, owner=owner, defaults={**fields, "engine_times": dict(times or {})}
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
    """The report's final section, shape by shape (webapp.campaigns.finals.problem_apply_final,
    as a live campaign's finals store theirs). Returns how many baseline timings it stored."""
    count = 0
    problems = {str(p): p for p in campaign.problems.all()}
    for key, section in final.items():
        problem = problems.get(key)
        if problem is not None and isinstance(section, Mapping):
            count += problem_apply_final(problem=problem, section=section)
    return count
