"""The code out of a model's answer, and the static gate on it before anything is compiled.

:func:`extract_source` prefers a fenced block: among the fenced blocks, those tagged as CUDA/C++ and
those that define the ABI entry point win, then the longest. It copes with what models get wrong: an
unclosed final fence, ``<think>`` sections, fences of four backticks or tildes, prose around the
code, or no fence at all (then the text from the first ``#include`` is taken when it defines
``gemmforge_hgemm``). An answer with no code is data (:data:`NO_CODE`), not an exception.
:func:`check_answer` extracts, then runs engine.compilation.static_checks.check_candidate on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine import abi
from engine.compilation.static_checks import StaticResult, check_candidate

NO_CODE = "llm_no_code"  # the answer holds no usable source
EMPTY = "llm_empty"  # the backend returned nothing (or failed)

_THINK_RE = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.MULTILINE)
_CODE_TAGS = {"cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "hpp", "h", "cuh"}
_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include\b", re.MULTILINE)


@dataclass(frozen=True)
class Extraction:
    """``source`` is None when the answer holds no code; ``how`` says where it came from."""

    source: str | None
    how: str  # "fenced", "unclosed_fence", "bare", or "none"
    blocks: int = 0  # fenced blocks found


@dataclass(frozen=True)
class CheckedAnswer:
    """An answer after extraction and the static gate."""

    ok: bool
    source: str | None
    reason: str  # "ok", NO_CODE or a static_checks reason
    message: str
    extraction: Extraction
    static: StaticResult | None = None


def _blocks(text: str) -> tuple[list[tuple[str, str]], str | None]:
    """Closed fenced blocks as (tag, body), and the body of an unclosed final block."""
    blocks: list[tuple[str, str]] = []
    matches = list(_FENCE_RE.finditer(text))
    i = 0
    while i < len(matches):
        opener = matches[i]
        fence, tag = opener.group(1), opener.group(2).lower()
        closer = next(
            (
                j
                for j in range(i + 1, len(matches))
                if matches[j].group(1)[0] == fence[0]
                and len(matches[j].group(1)) >= len(fence)
                and not matches[j].group(2)
            ),
            None,
        )
        if closer is None:
            return blocks, text[opener.end() + 1 :]
        blocks.append((tag, text[opener.end() + 1 : matches[closer].start()]))
        i = closer + 1
    return blocks, None


def _score(tag: str, body: str) -> tuple[int, int, int]:
    return (
        abi.ENTRY_SYMBOL in body,
        tag in _CODE_TAGS or bool(_INCLUDE_RE.search(body)),
        len(body),
    )


def extract_source(answer: str | None) -> Extraction:
    if not answer or not answer.strip():
        return Extraction(None, "none")
    text = _THINK_RE.sub("", answer.replace("\r\n", "\n"))
    blocks, unclosed = _blocks(text)
    candidates = [(tag, body) for tag, body in blocks if body.strip()]
    if candidates:
        tag, body = max(candidates, key=lambda b: _score(*b))
        if _score(tag, body)[:2] != (False, False) or unclosed is None:
            return Extraction(body.strip("\n") + "\n", "fenced", len(blocks))
    if unclosed is not None and unclosed.strip() and abi.ENTRY_SYMBOL in unclosed:
        return Extraction(unclosed.strip("\n") + "\n", "unclosed_fence", len(blocks))
    if abi.ENTRY_SYMBOL in text and (match := _INCLUDE_RE.search(text)):
        return Extraction(text[match.start() :].strip("\n") + "\n", "bare", len(blocks))
    return Extraction(None, "none", len(blocks))


def check_answer(answer: str | None) -> CheckedAnswer:
    """Extract the source and run the static gate on it (no compiler is involved)."""
    extraction = extract_source(answer)
    if extraction.source is None:
        if not answer or not answer.strip():
            return CheckedAnswer(False, None, EMPTY, "the model returned no text", extraction)
        return CheckedAnswer(
            False,
            None,
            NO_CODE,
            "the answer holds no CUDA source: answer with one complete .cu file in a single "
            "```cuda block",
            extraction,
        )
    source = extraction.source
    if abi.ENTRY_SYMBOL not in source:
        return CheckedAnswer(
            False,
            source,
            NO_CODE,
            f"the code does not define {abi.ENTRY_SYMBOL}: implement the whole C ABI",
            extraction,
        )
    verdict = check_candidate(source)
    return CheckedAnswer(verdict.ok, source, verdict.reason, verdict.message, extraction, verdict)
