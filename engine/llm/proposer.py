"""LLMProposer: engine.campaign's Proposer interface, with a model writing the candidates.

Each proposal is a :class:`~engine.llm.evaluate.SourceKernel` (``Proposal.source`` holds the code,
``Proposal.meta`` the conversation, the raw answer and the token counts, so the dashboard can
show them). Cheap failures are repaired at once, in the same conversation, up to ``max_turns``
model turns: an answer without code, code the static gate rejects, a repeat of an earlier
candidate. Compile and verification failures come back through ``observe`` and are sent to the
model as a repair turn of that candidate's conversation in the next round (while it has turns
left). A candidate that still fails after its last turn is proposed anyway, so that the campaign
records it with its failure reason.

The campaign must compile with an :class:`~engine.llm.evaluate.SourceCompiler` (it gates the
sources and builds them); give the same one to the proposer to show ptxas reports and full nvcc
logs in prompts.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.codegen import get_family
from engine.compilation.source_kernel import SourceKernel
from engine.llm.backends import Backend, Completion
from engine.llm.evaluate import SourceCompiler
from engine.llm.extract import EMPTY, check_answer
from engine.llm.prompt import (
    GpuFacts,
    KernelExample,
    Message,
    PromptContext,
    build_messages,
    format_ptxas,
    repair_message,
)
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.mirror import merge_kernels
from engine.propose.proposers import Proposal
from engine.propose.space import SearchSpace
from engine.timing import cublaslt_kernels

NAME = "llm"
BACKEND_ERROR = "llm_backend"


@dataclass
class _Thread:
    """A conversation that produced a candidate: its messages up to and including the answer."""

    messages: list[Message]
    turns: int  # model turns spent in this conversation


class LLMProposer:
    name = NAME

    def __init__(
        self,
        backend: Backend,
        *,
        gpu: GpuFacts | None = None,
        compiler: SourceCompiler | None = None,
        baseline: str = "cublaslt_autotune",
        top_k: int = 4,
        max_turns: int = 3,
        notes: str = "",
        cublaslt_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.backend = backend
        self.gpu = gpu or GpuFacts.h200()
        self.compiler = compiler
        self.baseline = baseline
        self.top_k = top_k
        self.max_turns = max_turns
        self.notes = notes
        # problem key → the kernels cuBLASLt runs on it (engine.propose.mirror.load_targets)
        self.cublaslt_kernels = {k: list(v) for k, v in (cublaslt_kernels or {}).items()}
        self.threads: dict[str, _Thread] = {}  # candidate name → its conversation
        self.repairs: dict[str, list[tuple[str, str]]] = {}  # problem key → [(name, error)]
        self._counter = itertools.count()

    # -- the Proposer interface ----------------------------------------------------------------
    def propose(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        history: Sequence[CandidateRecord],
        exclude: set[str],
        rng: random.Random,
    ) -> list[Proposal]:
        taken = set(exclude)
        out: list[Proposal] = []
        queue = self.repairs.setdefault(problem.key, [])
        while len(out) < n:
            if queue:
                name, error = queue.pop(0)
                thread = self.threads[name]
                proposal = self._converse(
                    problem, list(thread.messages), thread.turns, taken, error, parent=name
                )
            else:
                context = self.context(problem, history)
                proposal = self._converse(problem, build_messages(context), 0, taken, None)
            taken.add(proposal.config.name)
            out.append(proposal)
        return out

    def observe(
        self, problem: Problem, space: SearchSpace, records: Sequence[CandidateRecord]
    ) -> None:
        """Failed candidates of ours with turns left go back to the model next round."""
        queue = self.repairs.setdefault(problem.key, [])
        for record in records:
            thread = self.threads.get(record.name)
            if record.proposer != self.name or thread is None:
                continue
            if record.status == CandidateStatus.OK or thread.turns >= self.max_turns:
                self.threads.pop(record.name, None)
                continue
            queue.append((record.name, self.error_text(record)))

    def learn_cublaslt_kernels(self, problem: Problem, kernels: Mapping[str, Any]) -> None:
        """What a GPU step measured cuBLASLt running on ``problem``, for the next prompts."""
        learned = cublaslt_kernels.by_layout(kernels, problem.layout.value)
        known = self.cublaslt_kernels.get(problem.key, [])
        self.cublaslt_kernels[problem.key] = merge_kernels(learned, known)

    # -- prompts -------------------------------------------------------------------------------
    def context(self, problem: Problem, history: Sequence[CandidateRecord]) -> PromptContext:
        """The best measured kernel, a contrastive top-k and the latest failure."""
        measured = sorted(
            (r for r in history if r.status == CandidateStatus.OK and r.seconds),
            key=lambda r: r.reward,
            reverse=True,
        )
        best = self.example(measured[0], with_source=True) if measured else None
        k = self.top_k
        picked = measured[: k - k // 2] + measured[max(k - k // 2, len(measured) - k // 2) :]
        examples = [self.example(r, with_source=i < 2) for i, r in enumerate(picked)]
        failed = [r for r in history if r.status != CandidateStatus.OK]
        last_error = None
        if failed:
            r = failed[-1]
            last_error = f"candidate {r.name} ({r.proposer}): {r.reason}: {self.error_text(r)}"
        return PromptContext(
            problem=problem,
            gpu=self.gpu,
            baseline=self.baseline,
            best=best,
            examples=examples,
            last_error=last_error,
            notes=self.notes_for(problem),
        )

    def notes_for(self, problem: Problem) -> str:
        """The campaign's notes, and what cuBLASLt runs on the problem where that is known."""
        kernels = self.cublaslt_kernels.get(problem.key, ())
        if not kernels or not kernels[0].get("label"):
            return self.notes
        line = (
            f"cuBLASLt, the baseline to beat, runs this kernel here: {kernels[0]['label']} "
            "(its algorithm id; tile M x N x K of C; thread-block cluster M x N; pipeline "
            "stages, s? = its own choice; split-K where it splits)."
        )
        return "\n".join(part for part in (self.notes, line) if part)

    def example(self, record: CandidateRecord, *, with_source: bool) -> KernelExample:
        source = record.source if with_source else None
        if with_source and source is None and record.family != NAME:
            try:
                source = get_family(record.family).from_knobs(record.knobs).render()
            except (KeyError, ValueError, TypeError):
                source = None
        ptxas = ""
        if self.compiler is not None and (built := self.compiler.results.get(record.name)):
            ptxas = format_ptxas(built.resources)
        return KernelExample(
            name=record.name,
            source=source,
            status=record.status,
            speedups=record.speedups(),
            seconds=record.seconds,
            baselines=record.baselines,
            ptxas=ptxas,
            reason=record.reason,
            message=record.message,
        )

    def error_text(self, record: CandidateRecord) -> str:
        """The failure as the model should see it: the nvcc log (without ptxas info) for
        compile errors, the verifier's or gate's message otherwise."""
        built = self.compiler.results.get(record.name) if self.compiler else None
        if record.status == CandidateStatus.COMPILE_ERROR and built is not None and built.log:
            lines = [ln for ln in built.log.splitlines() if "ptxas info" not in ln]
            return "\n".join(lines).strip() or record.message
        return f"[{record.reason or record.status}] {record.message}"

    # -- one candidate -------------------------------------------------------------------------
    def _converse(
        self,
        problem: Problem,
        messages: list[Message],
        turns: int,
        taken: set[str],
        error: str | None,
        *,
        parent: str | None = None,
    ) -> Proposal:
        if error is not None:
            messages.append(repair_message("compile or verification", error))
        tokens = {"prompt": 0, "completion": 0}
        while True:
            asked = list(messages)
            completion = self.backend.complete(asked)
            turns += 1
            tokens["prompt"] += completion.prompt_tokens
            tokens["completion"] += completion.completion_tokens
            reason, message, source = self._judge(completion, taken, problem)
            last = turns >= self.max_turns
            if not reason or last or reason == BACKEND_ERROR:
                break
            messages += [
                {"role": "assistant", "content": completion.text or ""},
                repair_message("static check" if source else "extraction", message),
            ]
        kernel = SourceKernel(
            source or "",
            problem.layout,
            key=f"{problem.key}:{next(self._counter)}:{completion.text or completion.error}",
            reject_reason=reason if reason and reason != "duplicate" else "",
            reject_message=message if reason else "",
        )
        if reason == "duplicate":  # a repeat after the last turn: record it as no code
            kernel = SourceKernel(
                "", problem.layout, key=kernel.key, reject_reason=reason, reject_message=message
            )
        self.threads[kernel.name] = _Thread(
            [*asked, {"role": "assistant", "content": completion.text or ""}], turns
        )
        meta: dict[str, Any] = {
            "backend": self.backend.name,
            "messages": asked,
            "answer": completion.text,
            "error": completion.error,
            "finish_reason": completion.finish_reason,
            "turn": turns,
            "tokens": tokens,
            "seconds": completion.seconds,
        }
        return Proposal(kernel, self.name, parent=parent, source=source, meta=meta)

    def _judge(
        self, completion: Completion, taken: set[str], problem: Problem
    ) -> tuple[str, str, str | None]:
        """(reason, message, source); reason "" means a candidate worth compiling."""
        if not completion.ok:
            return BACKEND_ERROR, completion.error or "no answer", None
        checked = check_answer(completion.text)
        if not checked.ok:
            reason = checked.reason if checked.reason != EMPTY else EMPTY
            return reason, checked.message, checked.source
        assert checked.source is not None
        if SourceKernel(checked.source, problem.layout).name in taken:
            return (
                "duplicate",
                "this kernel is identical to an earlier candidate: change the tiling, the "
                "pipeline or the memory path",
                checked.source,
            )
        return "", "", checked.source
