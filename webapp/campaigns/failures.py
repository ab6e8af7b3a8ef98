"""Failures the kernel did not cause: the recording harness running out of GPU memory (torch's
allocator, cuBLAS's workspace) is not a bad kernel, so it gets no penalty reward and reads as a
harness failure; and long failure messages shown once, folded after their first line."""

from __future__ import annotations

from typing import Any

# Reasons that are the kernel's own memory faults (engine.outcomes.Reason), never the harness's.
KERNEL_MEMORY_REASONS = ("memory", "gpu_memory")
HARNESS_MARKERS = ("out of memory", "outofmemoryerror", "cublas_status_alloc_failed")
SUMMARY_CHARS = 160


def is_harness_failure(*, status: str, reason: str, message: str) -> bool:
    """True when a failed candidate's message says the harness could not get GPU memory."""
    if status in ("ok", "done") or reason in KERNEL_MEMORY_REASONS:
        return False
    text = (message or "").lower()
    return any(marker in text for marker in HARNESS_MARKERS)


def folded(message: str) -> dict[str, Any]:
    """{"summary": its first line (shortened), "rest": whether there is more to unfold}."""
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    summary = first if len(first) <= SUMMARY_CHARS else first[: SUMMARY_CHARS - 1] + "…"
    return {"summary": summary, "full": message, "more": summary != (message or "").strip()}
