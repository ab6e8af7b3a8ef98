"""Where a campaign keeps its state: a Protocol, and a SQLite implementation for the CLI.

The web app provides its own (Django-backed) implementation of the same Protocol. A candidate is
keyed by (campaign, problem key, name), so a resumed campaign knows what it has already run and
never runs it again.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from engine.outcomes import CandidateRecord
from engine.problem import Problem


class CampaignStorage(Protocol):
    def open_campaign(self, name: str, settings: Mapping[str, Any]) -> None:
        """Create campaign ``name``, or reopen it (its stored settings are kept)."""
        ...

    def add_problem(self, campaign: str, problem: Problem) -> None: ...

    def set_problem_status(self, campaign: str, problem_key: str, status: str) -> None: ...

    def problem_status(self, campaign: str, problem_key: str) -> str | None: ...

    def candidates(self, campaign: str, problem_key: str) -> list[CandidateRecord]:
        """Stored candidates of one problem, in the order they were recorded."""
        ...

    def record(self, campaign: str, problem_key: str, records: Sequence[CandidateRecord]) -> None:
        """Store ``records`` in one transaction (a name stored earlier is an error)."""
        ...


SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    name TEXT PRIMARY KEY,
    settings TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS problems (
    campaign TEXT NOT NULL REFERENCES campaigns(name),
    key TEXT NOT NULL,
    m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, layout TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    PRIMARY KEY (campaign, key)
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    problem TEXT NOT NULL,
    name TEXT NOT NULL,
    family TEXT NOT NULL,
    knobs TEXT NOT NULL,
    proposer TEXT NOT NULL,
    parent TEXT,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    reward REAL NOT NULL,
    seconds REAL,
    baselines TEXT NOT NULL DEFAULT '{}',
    timings TEXT NOT NULL DEFAULT '{}',
    gpu_seconds REAL NOT NULL DEFAULT 0,
    round INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    UNIQUE (campaign, problem, name),
    FOREIGN KEY (campaign, problem) REFERENCES problems(campaign, key)
);
CREATE TABLE IF NOT EXISTS candidate_sources (
    campaign TEXT NOT NULL,
    problem TEXT NOT NULL,
    name TEXT NOT NULL,
    source TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (campaign, problem, name)
);
"""


# a CandidateRecord's columns (candidates AS c, candidate_sources AS s), in _record's order
RECORD_COLUMNS = (
    "c.name, c.family, c.knobs, c.proposer, c.status, c.reward, c.parent, c.reason, c.message, "
    "c.seconds, c.baselines, c.timings, c.gpu_seconds, c.round, s.source, s.meta"
)


def _record(r: Sequence[Any]) -> CandidateRecord:
    return CandidateRecord(
        name=r[0],
        family=r[1],
        knobs=json.loads(r[2]),
        proposer=r[3],
        status=r[4],
        reward=r[5],
        parent=r[6],
        reason=r[7],
        message=r[8],
        seconds=r[9],
        baselines=json.loads(r[10]),
        timings=json.loads(r[11]),
        gpu_seconds=r[12],
        round=r[13],
        source=r[14],
        meta=json.loads(r[15]) if r[15] else {},
    )


class SqliteStorage:
    """CampaignStorage in one SQLite file (``":memory:"`` for throw-away runs)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.executescript(SCHEMA)
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def open_campaign(self, name: str, settings: Mapping[str, Any]) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO campaigns (name, settings, created) VALUES (?, ?, ?)",
                (name, json.dumps(settings, sort_keys=True), time.time()),
            )

    def campaign_names(self) -> list[str]:
        """Every campaign in the file, in the order they were opened."""
        rows = self._db.execute("SELECT name FROM campaigns ORDER BY rowid").fetchall()
        return [name for (name,) in rows]

    def campaign_settings(self, name: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT settings FROM campaigns WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else None

    def problems(self, campaign: str) -> list[Problem]:
        """The campaign's problems, in the order they were added."""
        rows = self._db.execute(
            "SELECT m, n, k, layout FROM problems WHERE campaign = ? ORDER BY rowid", (campaign,)
        ).fetchall()
        return [Problem(m, n, k, layout) for m, n, k, layout in rows]

    def add_problem(self, campaign: str, problem: Problem) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO problems (campaign, key, m, n, k, layout) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (campaign, problem.key, problem.m, problem.n, problem.k, problem.layout.value),
            )

    def set_problem_status(self, campaign: str, problem_key: str, status: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE problems SET status = ? WHERE campaign = ? AND key = ?",
                (status, campaign, problem_key),
            )

    def problem_status(self, campaign: str, problem_key: str) -> str | None:
        row = self._db.execute(
            "SELECT status FROM problems WHERE campaign = ? AND key = ?", (campaign, problem_key)
        ).fetchone()
        return row[0] if row else None

    def measured(self) -> list[tuple[Problem, CandidateRecord]]:
        """Every measured (ok) candidate of every campaign in the file, with its problem: what
        a TransferProposer starts from. One query."""
        rows = self._db.execute(
            f"SELECT p.m, p.n, p.k, p.layout, {RECORD_COLUMNS} FROM candidates AS c "
            "JOIN problems AS p ON p.campaign = c.campaign AND p.key = c.problem "
            "LEFT JOIN candidate_sources AS s "
            "ON s.campaign = c.campaign AND s.problem = c.problem AND s.name = c.name "
            "WHERE c.status = 'ok' ORDER BY c.id"
        ).fetchall()
        return [(Problem(r[0], r[1], r[2], r[3]), _record(r[4:])) for r in rows]

    def candidates(self, campaign: str, problem_key: str) -> list[CandidateRecord]:
        rows = self._db.execute(
            f"SELECT {RECORD_COLUMNS} FROM candidates AS c "
            "LEFT JOIN candidate_sources AS s "
            "ON s.campaign = c.campaign AND s.problem = c.problem AND s.name = c.name "
            "WHERE c.campaign = ? AND c.problem = ? ORDER BY c.id",
            (campaign, problem_key),
        ).fetchall()
        return [_record(r) for r in rows]

    def record(self, campaign: str, problem_key: str, records: Sequence[CandidateRecord]) -> None:
        now = time.time()
        with self._lock, self._db:
            self._db.executemany(
                "INSERT INTO candidates (campaign, problem, name, family, knobs, proposer, parent, "
                "status, reason, message, reward, seconds, baselines, timings, gpu_seconds, "
                "round, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        campaign,
                        problem_key,
                        r.name,
                        r.family,
                        json.dumps(dict(r.knobs), sort_keys=True),
                        r.proposer,
                        r.parent,
                        r.status,
                        r.reason,
                        r.message,
                        r.reward,
                        r.seconds,
                        json.dumps(dict(r.baselines), sort_keys=True),
                        json.dumps(dict(r.timings), sort_keys=True),
                        r.gpu_seconds,
                        r.round,
                        now,
                    )
                    for r in records
                ],
            )
            self._db.executemany(
                "INSERT INTO candidate_sources (campaign, problem, name, source, meta) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (campaign, problem_key, r.name, r.source, json.dumps(dict(r.meta), default=str))
                    for r in records
                    if r.source is not None or r.meta
                ],
            )


def default_campaign_name(problems: Sequence[Problem], *, replay: bool) -> str:
    """``<layout>-<n>shapes-<digest of the shapes>``, ``replay-`` first for a replayed one: the
    same shapes name the same campaign, so a second run resumes the first."""
    keys = ",".join(p.key for p in problems)
    digest = hashlib.sha256(keys.encode()).hexdigest()[:8]
    return f"{'replay-' if replay else ''}{problems[0].layout.value}-{len(problems)}shapes-{digest}"
