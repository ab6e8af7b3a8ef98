"""What happened to a candidate: its status, the reason a verifier rejected it, and its record.

Status and reason are StrEnums: a member is equal to, and is stored and serialised as, its string,
which the campaign databases, the results' JSON and the web app hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class CandidateStatus(StrEnum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    REJECTED = "rejected"  # failed verification, or rejected while timed
    TIMEOUT = "timeout"  # nvcc or the verifier ran out of time
    MISSING = "missing"  # replay only: the table has no time for this candidate


class Reason(StrEnum):
    """Why a verifier passed or rejected a library (engine.verify.verifier.REASONS says more)."""

    OK = "ok"
    LOAD = "load"
    WORKSPACE = "workspace"
    LAUNCH = "launch"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    UNWRITTEN = "unwritten"
    WRONG = "wrong"
    PRECISION = "precision"
    GUARD_BAND = "guard_band"
    INPUT_MODIFIED = "input_modified"
    STREAM = "stream"
    C_DEPENDENT = "c_dependent"
    NONDETERMINISTIC = "nondeterministic"
    STREAM_ESCAPE = "stream_escape"
    THREADS = "threads"
    GPU_MEMORY = "gpu_memory"
    # the static gate (engine.compilation.static_checks), before any GPU time
    STATIC_SIZE = "static_size"
    STATIC_INCLUDE = "static_include"
    STATIC_API = "static_api"
    STATIC_SYMBOLS = "static_symbols"


@dataclass(frozen=True)
class CandidateRecord:
    """One executed (or failed) candidate of one problem in one campaign."""

    name: str
    family: str
    knobs: Mapping[str, Any]
    proposer: str
    status: str
    reward: float
    parent: str | None = None
    reason: str = ""
    message: str = ""
    seconds: float | None = None  # primary-protocol time; None on failure
    baselines: Mapping[str, float] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    round: int = 0
    source: str | None = None  # model-written candidates (engine.llm) carry their source
    meta: Mapping[str, Any] = field(default_factory=dict)  # e.g. the prompt and raw answer

    def speedups(self) -> dict[str, float]:
        """Speedup over each baseline (empty on failure)."""
        if self.seconds is None or self.seconds <= 0:
            return {}
        return {b: t / self.seconds for b, t in self.baselines.items()}
