"""engine.outcomes: statuses and reasons are stored as strings, so their values never change."""

from __future__ import annotations

import json
import sqlite3

from engine.outcomes import CandidateStatus, Reason
from engine.verify.verifier import REASONS

STORED_STATUSES = ["ok", "compile_error", "rejected", "timeout", "missing"]
STORED_REASONS = [
    "ok", "load", "workspace", "launch", "runtime_error", "crash", "timeout", "memory",
    "unwritten", "wrong", "precision", "guard_band", "input_modified", "stream", "c_dependent",
    "nondeterministic", "stream_escape", "threads", "gpu_memory", "static_size",
    "static_include", "static_api", "static_symbols",
]  # fmt: skip


def test_the_stored_strings_are_the_members_values():
    assert [status.value for status in CandidateStatus] == STORED_STATUSES
    assert [reason.value for reason in Reason] == STORED_REASONS


def test_every_reason_is_described():
    assert set(REASONS) == set(Reason)


def test_a_member_equals_serialises_and_stores_as_its_string():
    assert CandidateStatus.REJECTED == "rejected"
    assert "wrong" in {Reason.WRONG}
    assert json.dumps({"status": CandidateStatus.OK, "reason": Reason.STREAM}) == (
        '{"status": "ok", "reason": "stream"}'
    )
    assert f"[{Reason.STATIC_API}]" == "[static_api]"
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (status TEXT)")
    db.execute("INSERT INTO t VALUES (?)", (CandidateStatus.TIMEOUT,))
    assert db.execute("SELECT status, typeof(status) FROM t").fetchone() == ("timeout", "text")
