"""The evaluator chain for model-written sources: static gate → compile → verify → measure → reward.

:class:`SourceKernel` is a candidate that carries its source instead of a family config; it
quacks like engine.codegen.KernelConfig (``FAMILY``, ``name``, ``knobs()``, ``render()``) so the
campaign loop handles it unchanged. :class:`SourceCompiler` is a campaign compiler
(``Campaign(compiler=...)``) for batches that mix family configs and sources: a source is gated
by engine.compilation.static_checks before nvcc, built against the shared CUDA runtime and its
library's imports are checked after; a gate rejection comes back as a :class:`GatedCompileResult`
whose ``rejected_by`` names the static reason. :class:`ChainEvaluator` runs the whole chain for one
source (the GRPO reward), with any engine.execution executor (LocalGpuExecutor on the GPU,
ReplayExecutor or a fake in tests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.compilation import static_checks
from engine.compilation.compile import CompileResult, compile_configs, source_hash
from engine.compilation.source_kernel import DEFAULT_ARCHS, Builder, SourceKernel, default_builder
from engine.execution.executor import CompiledCandidate, GpuExecutor, Outcome
from engine.execution.reward import reward_of
from engine.llm.extract import NO_CODE, check_answer
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem


@dataclass(frozen=True)
class GatedCompileResult(CompileResult):
    """A CompileResult that the static gate stopped (``rejected_by`` is its reason)."""

    rejected_by: str = ""


def _gated(source: str, archs: tuple[str, ...], reason: str, message: str) -> GatedCompileResult:
    return GatedCompileResult(
        ok=False,
        library=None,
        source_hash=source_hash(source),
        archs=archs,
        command="",
        log=message,
        seconds=0.0,
        cached=False,
        error=f"{reason}: {message}",
        rejected_by=reason,
    )


def gate_source(kernel: SourceKernel, archs: tuple[str, ...]) -> GatedCompileResult | None:
    """The source checks before nvcc (None: passed)."""
    if kernel.reject_reason:
        return _gated(kernel.source, archs, kernel.reject_reason, kernel.reject_message)
    if not kernel.source:
        return _gated(kernel.source, archs, NO_CODE, "the answer holds no CUDA source")
    gate = check_answer(f"```cuda\n{kernel.source}```")
    return None if gate.ok else _gated(kernel.source, archs, gate.reason, gate.message)


def default_library_check(result: CompileResult) -> static_checks.StaticResult:
    assert result.library is not None
    return static_checks.check_library(result.library)


class SourceCompiler:
    """A campaign compiler for family configs and SourceKernels; keeps every result by name
    (``results``) so the proposer can show ptxas reports and full compiler logs."""

    def __init__(
        self,
        *,
        archs: tuple[str, ...] = DEFAULT_ARCHS,
        builder: Builder | None = None,
        library_check: Callable[[CompileResult], static_checks.StaticResult] | None = None,
        family_compiler: Callable[[Sequence[Any]], list[CompileResult]] | None = None,
        jobs: int | None = None,
        config: Any = None,
    ) -> None:
        self.archs = archs
        self.builder = builder or default_builder(jobs=jobs, config=config)
        self.library_check = library_check or default_library_check
        self.family_compiler = family_compiler
        self.jobs, self.config = jobs, config
        self.results: dict[str, CompileResult] = {}
        self._lock = threading.Lock()

    def __call__(self, configs: Sequence[Any]) -> list[CompileResult]:
        out: list[CompileResult | None] = [None] * len(configs)
        family = [i for i, c in enumerate(configs) if not isinstance(c, SourceKernel)]
        if family:
            compile_family = self.family_compiler or self._compile_family
            for i, result in zip(family, compile_family([configs[i] for i in family]), strict=True):
                out[i] = result
        by_layout: dict[Layout, list[int]] = {}
        for i, c in enumerate(configs):
            if isinstance(c, SourceKernel):
                if rejected := gate_source(c, self.archs):
                    out[i] = rejected
                else:
                    by_layout.setdefault(c.layout, []).append(i)
        for layout, where in by_layout.items():
            built = self.builder([configs[i].render() for i in where], layout, self.archs)
            for i, result in zip(where, built, strict=True):
                if result.ok and result.library is not None:
                    verdict = self.library_check(result)
                    if not verdict.ok:
                        result = _gated(
                            configs[i].source, self.archs, verdict.reason, verdict.message
                        )
                out[i] = result
        results = [r for r in out if r is not None]
        with self._lock:
            for config, result in zip(configs, results, strict=True):
                self.results[config.name] = result
        return results

    def _compile_family(self, configs: Sequence[Any]) -> list[CompileResult]:
        return compile_configs(configs, jobs=self.jobs, config=self.config)


@dataclass(frozen=True)
class Evaluation:
    """One source through the chain. ``stage`` is where it stopped (or "measured")."""

    name: str
    status: str
    reason: str
    message: str
    reward: float
    stage: str  # "static", "compile", "verify", "measured"
    seconds: float | None = None
    speedups: Mapping[str, float] = field(default_factory=dict)
    compile: CompileResult | None = None
    outcome: Outcome | None = None


class Evaluator(Protocol):
    def evaluate(self, problem: Problem, source: str) -> Evaluation: ...


class ChainEvaluator:
    """static gate → compile → (library gate) → executor (verify and time) → reward."""

    def __init__(
        self,
        *,
        executor: GpuExecutor,
        compiler: SourceCompiler | None = None,
        baseline: str = "cublaslt_autotune",
        failure_reward: float = -2.0,
        static_reward: float | None = None,
    ) -> None:
        self.executor = executor
        self.compiler = compiler or SourceCompiler()
        self.baseline = baseline
        self.failure_reward = failure_reward
        # Below failure_reward by default: a gate rejection is worse than an honest miss.
        self.static_reward = failure_reward - 1.0 if static_reward is None else static_reward

    def evaluate(self, problem: Problem, source: str) -> Evaluation:
        kernel = SourceKernel(source, problem.layout)
        if self.executor.needs_libraries:
            result = self.compiler([kernel])[0]
        else:  # a replay executor: only the source gate runs
            result = gate_source(kernel, self.compiler.archs)
        if isinstance(result, GatedCompileResult):
            return Evaluation(
                kernel.name,
                CandidateStatus.REJECTED,
                result.rejected_by,
                result.log,
                self.static_reward,
                "static",
                compile=result,
            )
        if result is not None and (not result.ok or result.library is None):
            status = CandidateStatus.TIMEOUT if result.timed_out else CandidateStatus.COMPILE_ERROR
            return Evaluation(
                kernel.name,
                status,
                "nvcc_timeout" if result.timed_out else "nvcc",
                result.log or result.error or "did not compile",
                self.failure_reward,
                "compile",
                compile=result,
            )
        library = result.library if result is not None else None
        outcome = self.executor.execute(problem, [CompiledCandidate(kernel.name, kernel, library)])[
            0
        ]
        reward = reward_of(outcome, self.baseline, self.failure_reward)
        speedups = (
            {b: t / outcome.seconds for b, t in outcome.baselines.items()}
            if outcome.ok and outcome.seconds
            else {}
        )
        return Evaluation(
            kernel.name,
            outcome.status,
            outcome.reason,
            outcome.message,
            reward,
            "measured" if outcome.ok else "verify",
            seconds=outcome.seconds,
            speedups=speedups,
            compile=result,
            outcome=outcome,
        )
