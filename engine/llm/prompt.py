"""The prompt an LLM proposer sends: everything a kernel writer needs, and one request.

A prompt holds, in this order: the problem (shape, layout, FLOPs, bytes), the GPU's facts, the
kernel C ABI contract (engine.abi.CONTRACT and the header), the current best kernel's source with
its timings and ptxas report, the top-k earlier candidates with their speedups (best and worst
together, contrastive as CUDA-L1 does) and the last compile or verification error. It asks for
exactly one complete .cu file in one fenced block. A failed candidate's error goes back as a
repair turn (:func:`repair_message`) in the same conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import abi
from engine.codegen import triton_blocks
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}

MAX_SOURCE_CHARS = 12_000  # per kernel shown; longer sources are cut in the middle
MAX_ERROR_CHARS = 4_000

SYSTEM = (
    "You are an expert CUDA performance engineer. You write HGEMM kernels for NVIDIA GPUs "
    "(tensor cores: mma.sync, wgmma, TMA, cp.async; CUTLASS/CuTe headers are available) that "
    "beat cuBLASLt on one exact problem. You answer with one complete CUDA C++ file."
)


@dataclass(frozen=True)
class GpuFacts:
    """What a kernel writer needs to know about the target GPU."""

    name: str
    arch: str  # e.g. sm_90a
    sm_count: int
    smem_per_block_optin: int  # bytes, the most dynamic shared memory one block may opt into
    smem_per_sm: int  # bytes
    l2_bytes: int
    registers_per_sm: int = 65536
    memory_bandwidth: float = 0.0  # bytes/s, 0 when unknown
    tensor_flops: float = 0.0  # dense fp16 tensor FLOP/s, 0 when unknown

    @classmethod
    def h200(cls) -> GpuFacts:
        return cls(
            name="NVIDIA H200",
            arch="sm_90a",
            sm_count=132,
            smem_per_block_optin=232_448,
            smem_per_sm=233_472,
            l2_bytes=50 * 2**20,
            memory_bandwidth=4.8e12,
            tensor_flops=989e12,
        )

    @classmethod
    def from_torch(cls, device: int = 0) -> GpuFacts:
        """This machine's GPU (needs CUDA); bandwidth and FLOP/s are left unknown."""
        import torch

        p = torch.cuda.get_device_properties(device)
        major, minor = p.major, p.minor
        return cls(
            name=p.name,
            arch=f"sm_{major}{minor}{'a' if major >= 9 else ''}",
            sm_count=p.multi_processor_count,
            smem_per_block_optin=int(getattr(p, "shared_memory_per_block_optin", 0)),
            smem_per_sm=int(getattr(p, "shared_memory_per_multiprocessor", 0)),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)),
            registers_per_sm=int(getattr(p, "regs_per_multiprocessor", 65536)),
        )

    def describe(self) -> str:
        lines = [
            f"- GPU: {self.name}, compile target {self.arch}, {self.sm_count} SMs",
            f"- shared memory: {self.smem_per_block_optin // 1024} KiB per block (opt-in), "
            f"{self.smem_per_sm // 1024} KiB per SM; {self.registers_per_sm} registers per SM",
            f"- L2: {self.l2_bytes / 2**20:.0f} MiB",
        ]
        if self.memory_bandwidth:
            lines.append(f"- memory bandwidth: {self.memory_bandwidth / 1e12:.1f} TB/s")
        if self.tensor_flops:
            lines.append(f"- dense fp16 tensor throughput: {self.tensor_flops / 1e12:.0f} TFLOP/s")
        return "\n".join(lines)


@dataclass(frozen=True)
class KernelExample:
    """An earlier candidate as the prompt shows it."""

    name: str
    source: str | None  # None: shown by name and result only
    status: str = CandidateStatus.OK
    speedups: Mapping[str, float] = field(default_factory=dict)
    seconds: float | None = None
    baselines: Mapping[str, float] = field(default_factory=dict)
    ptxas: str = ""  # engine.llm.prompt.format_ptxas of its compile result
    reason: str = ""
    message: str = ""

    def result_line(self, baseline: str) -> str:
        if self.status != CandidateStatus.OK or self.seconds is None:
            return f"FAILED ({self.reason or self.status}: {_one_line(self.message)})"
        speedup = self.speedups.get(baseline)
        text = f"{self.seconds * 1e6:.2f} µs"
        if speedup is not None:
            text += f", {speedup:.3f}x {baseline}"
        return text


@dataclass(frozen=True)
class PromptContext:
    problem: Problem
    gpu: GpuFacts
    baseline: str = "cublaslt_autotune"
    best: KernelExample | None = None
    examples: Sequence[KernelExample] = ()  # top-k earlier candidates (contrastive), best first
    last_error: str | None = None  # the last compile or verification error, with its candidate
    notes: str = ""  # anything else the campaign wants said


def format_ptxas(resources: Sequence[Any]) -> str:
    """One line per kernel entry from engine.compilation.compile.KernelResources."""
    lines = []
    for r in resources:
        spill = f", spills {r.spill_stores_bytes}B st/{r.spill_loads_bytes}B ld" if r.spills else ""
        lines.append(
            f"{r.name} ({r.arch}): {r.registers} registers, {r.shared_bytes} B static smem, "
            f"{r.stack_bytes} B stack{spill}"
        )
    return "\n".join(lines)


def problem_text(problem: Problem) -> str:
    b = "K x N (NN: B row-major as torch.matmul takes it)"
    if problem.layout is Layout.TN:
        b = "N x K (TN: B row-major as nn.Linear stores its weight; C = A . B^T)"
    return (
        f"- C = A . B with M={problem.m}, N={problem.n}, K={problem.k}, layout "
        f"{problem.layout.value.upper()}\n"
        f"- A is M x K row-major, B is {b}, C is M x N row-major; fp16 in and out, fp32 "
        "accumulation\n"
        f"- {problem.flops / 1e9:.2f} GFLOP, at least {problem.operand_bytes / 2**20:.1f} MiB moved"
    )


def build_messages(ctx: PromptContext) -> list[Message]:
    """The first turn: a system message and one user message."""
    parts = [
        "## Problem\n" + problem_text(ctx.problem),
        "## GPU\n" + ctx.gpu.describe(),
        "## Contract (the harness rejects anything else)\n"
        + abi.CONTRACT
        + "The header gemmforge_abi.h is:\n```cpp\n"
        + abi.HEADER.read_text()
        + "```\n"
        "Allowed includes: gemmforge_abi.h, the CUDA toolkit headers (cuda_runtime.h, "
        "cuda_fp16.h, mma.h, cuda_pipeline.h, cooperative_groups.h, ...), cute/ and cutlass/. "
        "No cuBLAS, no streams, events, allocation, synchronisation, threads, files, "
        "environment or dynamic loading: the source is scanned and the library's imports are "
        "checked against an allow-list. Correctness is checked on several input distributions "
        "(an error beyond fp32 accumulation is rejected), with C pre-filled with NaN and guard "
        "bands around every buffer; the time is the median of many calls with a flushed L2.",
    ]
    if ctx.best is not None:
        parts.append(_kernel_section("Current best kernel", ctx.best, ctx.baseline))
    if ctx.examples:
        rows = [
            f"{i}. {e.name}: {e.result_line(ctx.baseline)}" for i, e in enumerate(ctx.examples, 1)
        ]
        shown = [
            _kernel_section(f"Earlier candidate {e.name}", e, ctx.baseline)
            for e in ctx.examples
            if e.source and (ctx.best is None or e.name != ctx.best.name)
        ]
        parts.append(
            "## Earlier candidates for this problem (compare what made the fast ones fast)\n"
            + "\n".join(rows)
            + ("\n\n" + "\n\n".join(shown) if shown else "")
        )
    shown = [ctx.best, *ctx.examples]
    if any(e is not None and e.source and triton_blocks.is_triton_source(e.source) for e in shown):
        parts.append(TRITON_NOTE)
    if ctx.last_error:
        parts.append("## Last error\n" + _clip(ctx.last_error, MAX_ERROR_CHARS))
    if ctx.notes:
        parts.append("## Notes\n" + ctx.notes)
    parts.append(
        "## Task\nWrite a faster kernel for this exact problem. Think briefly about the tile "
        "shape, pipeline depth and memory path, then answer with ONE complete .cu file in a "
        "single ```cuda fenced block (no other code blocks)."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


TRITON_NOTE = (
    "## Triton kernels\n"
    "A kernel above whose source holds a `/* gemmforge-triton ... gemmforge-triton */` block is "
    "a Triton kernel: the build compiles the Python after `---` with triton.compile for this "
    "GPU (the JSON before it gives the kernel's name, signature, constexpr values, warps and "
    "stages) and the launcher below the block runs its cubin. You may answer with such a file: "
    "keep the launcher and the kernel's parameters (A, B, C, M, N, K, workspace, then the "
    "constexprs the JSON names), change the Triton code and the JSON's values. The Python may "
    "import only triton, triton.language and math, and may not use open, exec, eval, "
    "getattr or private attributes."
)


def repair_message(stage: str, error: str) -> Message:
    """The user turn that sends a failed candidate's error back to the model."""
    return {
        "role": "user",
        "content": (
            f"Your kernel failed at the {stage} stage:\n```\n{_clip(error, MAX_ERROR_CHARS)}\n```\n"
            "Fix it and answer with the complete corrected .cu file in a single ```cuda block."
        ),
    }


def prompt_text(messages: Sequence[Message]) -> str:
    """Messages as plain text, for models without a chat template and for the record."""
    return "\n\n".join(f"<|{m['role']}|>\n{m['content']}" for m in messages) + "\n\n<|assistant|>\n"


def _kernel_section(title: str, example: KernelExample, baseline: str) -> str:
    lines = [f"## {title}: {example.name} — {example.result_line(baseline)}"]
    if example.baselines:
        lines.append(
            "baselines: "
            + ", ".join(f"{b} {t * 1e6:.2f} µs" for b, t in sorted(example.baselines.items()))
        )
    if example.ptxas:
        lines.append("ptxas:\n" + example.ptxas)
    if example.source:
        lines.append("```cuda\n" + _clip(example.source, MAX_SOURCE_CHARS).rstrip() + "\n```")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n/* … {len(text) - limit} characters cut … */\n{text[-half:]}"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
