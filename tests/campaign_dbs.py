"""Engine campaign databases for tests: a campaign's settings, shapes and recorded candidates
written through engine.campaign.storage, as `engine optimize` leaves them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.campaign.storage import SqliteStorage
from engine.outcomes import CandidateRecord
from engine.problem import Problem


def write_campaign(
    db: Path,
    name: str,
    shapes: Mapping[Problem, Sequence[CandidateRecord]],
    *,
    settings: Mapping[str, Any] | None = None,
    status: str | None = None,
) -> Path:
    """Campaign ``name`` in ``db`` (created, or added beside the campaigns it holds): each shape
    with its records, and ``status`` (e.g. "budget": its search stopped) where given."""
    storage = SqliteStorage(db)
    try:
        storage.open_campaign(name, settings or {})
        for problem, records in shapes.items():
            storage.add_problem(name, problem)
            if records:
                storage.record(name, problem.key, records)
            if status is not None:
                storage.set_problem_status(name, problem.key, status)
    finally:
        storage.close()
    return db
