"""Fakes for the engine.llm tests: no nvcc, no GPU, no downloads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from engine.compilation.compile import CompileResult, source_hash
from engine.compilation.static_checks import StaticResult
from engine.execution.executor import CompiledCandidate, Outcome
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem

GOOD_KERNEL = """\
#include "gemmforge_abi.h"
__global__ void k(const __half* A, const __half* B, __half* C, int M, int N, int K) {}
extern "C" int gemmforge_hgemm(const __half* A, const __half* B, __half* C, int M, int N,
                               int K, void* workspace, cudaStream_t stream) {
  k<<<1, 1, 0, stream>>>(A, B, C, M, N, K);
  return (int)cudaGetLastError();
}
extern "C" size_t gemmforge_workspace_size(int M, int N, int K) { return 0; }
GEMMFORGE_DEFINE_ABI_VERSION
"""
CHEAT_KERNEL = GOOD_KERNEL.replace(
    "  k<<<", "  cudaStream_t mine; cudaStreamCreate(&mine);\n  k<<<"
)
BROKEN_KERNEL = GOOD_KERNEL.replace("return 0; }", "return 0 }")  # "does not compile"
WRONG_KERNEL = GOOD_KERNEL.replace("int K) {}", "int K) { /* wrong */ }")


def fenced(source: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```cuda\n{source}```\n"


class FakeBuilder:
    """Stands in for nvcc: 'return 0 }' does not compile; records what it built."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.built: list[str] = []

    def __call__(
        self, sources: Sequence[str], layout: Layout, archs: tuple[str, ...]
    ) -> list[CompileResult]:
        out = []
        for source in sources:
            self.built.append(source)
            ok = "return 0 }" not in source
            library = self.tmp / f"{source_hash(source)[:12]}.so"
            if ok:
                library.write_text("fake")
            out.append(
                CompileResult(
                    ok=ok,
                    library=library if ok else None,
                    source_hash=source_hash(source),
                    archs=archs,
                    command="nvcc (fake)",
                    log="" if ok else 'kernel.cu(9): error: expected a ";"',
                    seconds=0.0,
                    cached=False,
                    error=None if ok else 'kernel.cu(9): error: expected a ";"',
                )
            )
        return out


def library_passes(result: CompileResult) -> StaticResult:
    return StaticResult.from_findings([])


class FakeExecutor:
    """Verifies by a marker and times by a hash of the library name: deterministic rewards."""

    needs_libraries = True
    arch = "sm_90"

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, problem: Problem, batch: Sequence[CompiledCandidate]) -> list[Outcome]:
        out = []
        for candidate in batch:
            self.executed.append(candidate.name)
            source = candidate.config.render()
            if "/* wrong */" in source:
                out.append(
                    Outcome(candidate.name, CandidateStatus.REJECTED, "wrong", "max error 3.5")
                )
                continue
            h = int(hashlib.sha256(candidate.name.encode()).hexdigest()[:8], 16)
            seconds = 1e-4 * (0.5 + (h % 1000) / 1000)
            baselines = {"cublaslt_autotune": 1e-4, "cublas": 1.1e-4}
            out.append(
                Outcome(
                    candidate.name,
                    CandidateStatus.OK,
                    seconds=seconds,
                    baselines=baselines,
                    timings={"device": {"seconds": seconds, "baselines": baselines}},
                    gpu_seconds=0.01,
                )
            )
        return out


class ScriptedBackend:
    """A Backend answering from a list (cycling its last answer)."""

    name = "scripted"

    def __init__(self, answers: Sequence[str | None]) -> None:
        from engine.llm.backends import TokenUsage

        self.answers = list(answers)
        self.asked: list[list[dict[str, str]]] = []
        self.usage = TokenUsage()

    def complete(self, messages):
        from engine.llm.backends import Completion

        self.asked.append([dict(m) for m in messages])
        answer = self.answers[min(len(self.asked) - 1, len(self.answers) - 1)]
        if answer is None:
            completion = Completion(None, "timed out after 1 s")
        else:
            completion = Completion(answer, prompt_tokens=100, completion_tokens=len(answer))
        self.usage.add(completion)
        return completion
