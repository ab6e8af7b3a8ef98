"""What happened to a candidate: its status, and the reason a verifier rejected it.

Both are StrEnums: a member is equal to, and is stored and serialised as, its string, which the
campaign databases, the results' JSON and the web app hold.
"""

from __future__ import annotations

from enum import StrEnum


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
