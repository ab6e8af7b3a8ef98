"""A candidate against another (its parent, the shape's best): unified and side-by-side diffs.

Kernel sources are compared when both candidates have one; records without a source (imported
from a recorded run, where the kernel is generated from its config) compare their config JSON.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from django.utils.html import escape

from webapp.campaigns.models import Candidate

CONTEXT_LINES = 3
MAX_LINES = 4000  # per side; past it the diff is not computed (difflib is quadratic at worst)


@dataclass(frozen=True, slots=True)
class CandidateDiff:
    against: str  # "parent" or "best"
    other: Candidate
    compared: str  # "source" or "config"
    unified: list[tuple[str, str]]  # (css class, line); empty when the two are identical
    side_by_side: str  # difflib.HtmlDiff table, its text escaped by difflib; "" when identical
    too_long: bool = False

    @property
    def identical(self) -> bool:
        return not self.unified and not self.too_long


def diff_text(candidate: Candidate, *, compared: str) -> list[str]:
    if compared == "source":
        return candidate.source.splitlines()
    return json.dumps(candidate.config, indent=2, sort_keys=True).splitlines()


def line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "diff-file"
    if line.startswith("@@"):
        return "diff-hunk"
    return {"+": "diff-add", "-": "diff-del"}.get(line[:1], "diff-same")


def candidate_diff(*, candidate: Candidate, other: Candidate, against: str) -> CandidateDiff:
    """``other`` (old, left) against ``candidate`` (new, right)."""
    compared = "source" if candidate.source and other.source else "config"
    old, new = diff_text(other, compared=compared), diff_text(candidate, compared=compared)
    if max(len(old), len(new)) > MAX_LINES:
        return CandidateDiff(against, other, compared, [], "", too_long=True)
    unified = [
        (line_class(line), line)
        for line in difflib.unified_diff(
            old, new, fromfile=other.name, tofile=candidate.name, n=CONTEXT_LINES, lineterm=""
        )
    ]
    side_by_side = ""
    if unified:
        # HtmlDiff escapes the lines it shows, not the column titles
        side_by_side = difflib.HtmlDiff(tabsize=4, wrapcolumn=80).make_table(
            old,
            new,
            fromdesc=escape(other.name),
            todesc=escape(candidate.name),
            context=True,
            numlines=CONTEXT_LINES,
        )
    return CandidateDiff(against, other, compared, unified, side_by_side)


def candidate_diffs(*, candidate: Candidate, best: Candidate | None) -> list[CandidateDiff]:
    """Against its parent (if any) and against the shape's best (unless it is the best)."""
    diffs = []
    if candidate.parent is not None:
        diffs.append(candidate_diff(candidate=candidate, other=candidate.parent, against="parent"))
    if best is not None and best.id != candidate.id:
        diffs.append(candidate_diff(candidate=candidate, other=best, against="best"))
    return diffs
