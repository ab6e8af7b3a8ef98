"""Kernel bundles: a zip a user builds once and calls from PyTorch.

The zip holds the Python package ``gemmforge_bundle`` (engine/bundle/package/): kernel sources,
the ABI header, a manifest that is the dispatch table, the ops (``torch.ops.gemmforge.hgemm`` and
``hgemm_linear``, falling back to torch.matmul for shapes without a kernel), a build script, a
verification script, and the campaign's results with their environment.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import abi
from engine.campaign.storage import CandidateRecord, SqliteStorage
from engine.compile import BASE_FLAGS
from engine.families import get_family
from engine.problem import Problem
from engine.ratios import (
    FASTER,
    Choice,
    Headline,
    Ratio,
    Session,
    ShapeBest,
    Timing,
    baseline_timings,
    choose,
    headline,
)

BASELINE_LABELS = {
    "torch": "torch.matmul",
    "cublas": "cuBLAS",
    "cublaslt_heuristic": "cuBLASLt heuristic",
    "cublaslt_autotune": "cuBLASLt autotuned",
}

PACKAGE_DIR = Path(__file__).resolve().parent / "package" / "gemmforge_bundle"
ROOT = "gemmforge_bundle"
# Bundled kernels are built without ptxas's verbose report
NVCC_FLAGS = tuple(f for f in BASE_FLAGS if f not in ("-Xptxas", "-v"))


class BundleError(ValueError):
    """A bundle cannot be made from this input; the message says why."""


@dataclass(frozen=True)
class BundleKernel:
    """The kernel chosen for one problem, with what it measured."""

    problem: Problem
    name: str
    source: str
    archs: tuple[str, ...]
    speedups: dict[str, float] = field(default_factory=dict)  # all from one session
    seconds: float | None = None
    session: str = "search"  # the measurement session the time and speedups come from


def is_faster(r: Ratio | None) -> bool:
    """Faster than the baseline beyond the measured noise (a tie falls back to it)."""
    return r is not None and r.verdict == FASTER


def record_session(record: CandidateRecord) -> Session | None:
    """The search step's session of a record: its time and the baselines timed with it."""
    kernel = Timing.of(record.seconds)
    if kernel is None:
        return None
    return Session("search", "device", kernel, baseline_timings(dict(record.baselines)))


def shape_choices(
    storage: SqliteStorage, campaign: str, problems: Sequence[Problem]
) -> dict[str, tuple[Choice, CandidateRecord]]:
    """Problem key → its kernel as engine.ratios.choose picks it (the best same-session ratio
    over cuBLASLt-autotune) and that kernel's record; shapes with none are left out."""
    out: dict[str, tuple[Choice, CandidateRecord]] = {}
    for problem in problems:
        records = {
            r.name: r
            for r in storage.candidates(campaign, problem.key)
            if r.status == "ok" and r.seconds
        }
        sessions = [(n, n, [s]) for n, r in records.items() if (s := record_session(r))]
        choice = choose(sessions)
        if choice is not None:
            out[problem.key] = (choice, records[choice.kernel])
    return out


def best_kernels(
    storage: SqliteStorage,
    campaign: str,
    problems: Sequence[Problem],
    *,
    over: str = "torch",
    include_slower: bool = False,
) -> list[BundleKernel]:
    """Per problem, its chosen kernel (shape_choices), kept only when it is faster than the
    ``over`` baseline beyond the noise (the op falls back to torch.matmul otherwise) unless
    ``include_slower``."""
    chosen = shape_choices(storage, campaign, problems)
    return [
        kernel_from_record(p, chosen[p.key][1])
        for p in problems
        if p.key in chosen and (include_slower or is_faster(chosen[p.key][0].ratios().get(over)))
    ]


def bundle_headline(storage: SqliteStorage, campaign: str, problems: Sequence[Problem]) -> Headline:
    """The campaign headline over every shape, bundled or not (the README opens with it)."""
    chosen = shape_choices(storage, campaign, problems)
    bests = [
        ShapeBest(p.key, float(p.flops), chosen[p.key][0]) for p in problems if p.key in chosen
    ]
    return headline(bests, without=len(problems) - len(bests))


def kernel_from_record(problem: Problem, record: CandidateRecord) -> BundleKernel:
    family = get_family(record.family)
    config = family.from_knobs({**record.knobs, "layout": problem.layout.value})
    return BundleKernel(
        problem=problem,
        name=config.name,
        source=config.render(),
        archs=tuple(config.archs),
        speedups=record.speedups(),
        seconds=record.seconds,
    )


def manifest(kernels: Iterable[BundleKernel], environment: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": 1,
        "nvcc_flags": list(NVCC_FLAGS),
        "environment": environment,
        "kernels": [
            {
                "m": k.problem.m,
                "n": k.problem.n,
                "k": k.problem.k,
                "layout": k.problem.layout.value,
                "name": k.name,
                "archs": list(k.archs),
                "speedups": k.speedups,
                "seconds": k.seconds,
                "session": k.session,
            }
            for k in kernels
        ],
    }


def results_csv(kernels: Sequence[BundleKernel]) -> str:
    baselines = sorted({b for k in kernels for b in k.speedups})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["m", "n", "k", "layout", "kernel", "seconds", *[f"speedup_{b}" for b in baselines]]
    )
    for k in kernels:
        p = k.problem
        writer.writerow(
            [
                p.m,
                p.n,
                p.k,
                p.layout.value,
                k.name,
                k.seconds,
                *[k.speedups.get(b, "") for b in baselines],
            ]
        )
    return out.getvalue()


def write_bundle(
    kernels: Sequence[BundleKernel],
    out: Path,
    *,
    environment: dict[str, Any],
    title: str,
    headline: Headline | None = None,
) -> Path:
    """Writes the zip; kernels with the same name are stored once."""
    names = [k.name for k in kernels]
    keys = [k.problem.key for k in kernels]
    if len(set(keys)) != len(keys):
        raise BundleError("two kernels for the same problem")
    data = manifest(kernels, environment)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            zf.write(path, f"{ROOT}/{path.name}")
        zf.writestr(f"{ROOT}/include/gemmforge_abi.h", abi.HEADER.read_text())
        for kernel in {k.name: k for k in kernels}.values():
            zf.writestr(f"{ROOT}/kernels/{kernel.name}.cu", kernel.source)
        zf.writestr(f"{ROOT}/kernels.json", json.dumps(data, indent=1))
        zf.writestr("results.json", json.dumps(data, indent=1))
        zf.writestr("results.csv", results_csv(kernels))
        zf.writestr("README.md", readme(title, kernels, environment, len(set(names)), headline))
    return out


def readme(
    title: str,
    kernels: Sequence[BundleKernel],
    environment: dict[str, Any],
    unique: int,
    headline: Headline | None = None,
) -> str:
    gpu = environment.get("gpu_name", "unknown GPU")
    block = "\n".join(headline.markdown(BASELINE_LABELS)) if headline else ""
    summary = f"## The campaign at a glance\n\n{block}\n" if block else ""
    rows = "\n".join(
        f"| {k.problem.shape} | {k.problem.layout.value} | `{k.name}` | "
        + ", ".join(f"{b} {s:.3f}x" for b, s in sorted(k.speedups.items()))
        + " |"
        for k in kernels
    )
    return f"""# gemmforge bundle: {title}

{len(kernels)} shape(s), {unique} kernel(s), measured on {gpu}. Shapes not listed fall back to
torch.matmul: by default a shape is bundled only when its kernel was faster than torch.matmul
beyond the measured noise, both timed in the same session.

{summary}
## Use
```sh
unzip this.zip && cd <folder>            # the folder holding gemmforge_bundle/
pip install nvidia-cutlass               # CUTLASS headers for the build (or set CUTLASS_INCLUDE)
python -m gemmforge_bundle.build         # needs nvcc; builds gemmforge_bundle/lib/*.so once
python -m gemmforge_bundle.verify        # re-checks correctness and speed on your GPU
```
```python
import torch, gemmforge_bundle
c = torch.ops.gemmforge.hgemm(a, b)              # a (M,K) @ b (K,N), fp16 CUDA contiguous
y = torch.ops.gemmforge.hgemm_linear(x, w)       # x (M,K) @ w.T, w (N,K) as in nn.Linear
```
The ops allocate only their output (and a kernel's workspace) from PyTorch's allocator and never
synchronise: they work under torch.compile and CUDA-graph capture (call each shape once first).

## Kernels
| shape | layout | kernel | speedup (baseline / kernel, same session) |
|---|---|---|---|
{rows}

`results.json` and `results.csv` hold the numbers and the environment they were measured in.
"""
