"""NVIDIA baselines as runners: torch.matmul, cuBLAS, cuBLASLt-heuristic, cuBLASLt-autotune;
and, on request, what torch tunes itself (engine.timing.torch_baselines: Inductor, TunableOp).

cuBLAS and cuBLASLt are called through a small C shim (engine/cuda/baselines.cu) via ctypes,
the same launch path as candidates, so that host overhead per call is comparable. Each baseline
runs in both layouts; a problem's baseline time is the faster of the two.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from engine import abi
from engine.compilation.compile import CompileResult, compile_source
from engine.compilation.toolkit import CublasNotFound, find_cublas
from engine.config import EngineConfig
from engine.config import load as load_config
from engine.gpu.runtime import BaselineLibrary, KernelLibrary, LoadError
from engine.problem import Layout, Problem
from engine.timing import cublaslt_kernels
from engine.timing.baseline_names import BASELINES
from engine.timing.protocols import Bench, Operands, Runner

LT_WORKSPACE_BYTES = 32 << 20  # NVIDIA's recommendation for Hopper
AUTOTUNE_HEAT_SECONDS = 0.5
AUTOTUNE_MAX_ALGOS = 100
SHIM_SOURCE = abi.CUDA_DIR / "baselines.cu"
# How the problem is described to cuBLASLt, shared with the bundle's shim, which runs the
# algorithms picked here: the header ships inside the bundle package, so it lives there (a path,
# not an import: the publish stage comes after this one).
LT_PLAN_HEADER = abi.CUDA_DIR.parent.joinpath(
    "publish", "bundle", "package", "gemmforge_bundle", "csrc", "cublaslt_plan.h"
)


def shim_source() -> str:
    """baselines.cu with cublaslt_plan.h's text in place of its include: the compile cache keys a
    build on its one source text, so an edit of the header builds the shim anew."""
    include = f'#include "{LT_PLAN_HEADER.name}"'
    source = SHIM_SOURCE.read_text()
    if source.count(include) != 1:
        raise ValueError(f"{SHIM_SOURCE} must include {LT_PLAN_HEADER.name} exactly once")
    return source.replace(include, LT_PLAN_HEADER.read_text().rstrip("\n"))


def build_shim(config: EngineConfig | None = None) -> CompileResult:
    config = config or load_config()
    paths = find_cublas(config)
    return compile_source(
        shim_source(),
        archs=("sm_90a",),
        libraries=paths.libraries,
        extra_flags=(
            f"-I{paths.include_dir}",
            f"-L{paths.lib_dir}",
            f"-Xlinker=-rpath={paths.lib_dir}",
        ),
        config=config,
    )


def _ptrs(ops: Operands, layout: Layout) -> tuple[int, int, int]:
    return ops.a.data_ptr(), ops.b(layout).data_ptr(), ops.c.data_ptr()


def torch_runner(problem: Problem, layout: Layout) -> Runner:
    def launch(ops: Operands, _stream: int) -> int:
        b = ops.b(layout)
        torch.mm(ops.a, b if layout is Layout.NN else b.t(), out=ops.c)
        return 0

    return Runner(f"torch_{layout.value}", "torch", layout, launch)


def cublas_runner(shim: BaselineLibrary, problem: Problem, layout: Layout) -> Runner:
    workspace = torch.empty(LT_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    tn = layout is Layout.TN

    def launch(ops: Operands, stream: int) -> int:
        a, b, c = _ptrs(ops, layout)
        ws = workspace.data_ptr()
        return shim.cublas(
            a, b, c, problem.m, problem.n, problem.k, ws, workspace.numel(), tn, stream
        )

    return Runner(f"cublas_{layout.value}", "cublas", layout, launch)


def cublaslt_runner(
    shim: BaselineLibrary, plan: int, algo: int, layout: Layout, kind: str, name: str
) -> Runner:
    workspace = torch.empty(LT_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")

    def launch(ops: Operands, stream: int) -> int:
        a, b, c = _ptrs(ops, layout)
        return shim.cublaslt(plan, algo, a, b, c, workspace.data_ptr(), stream)

    return Runner(name, kind, layout, launch, {"plan": plan, "algo": algo})


def candidate_runner(library: KernelLibrary, problem: Problem, name: str = "candidate") -> Runner:
    layout = problem.layout
    size = library.workspace_size(problem.m, problem.n, problem.k)
    workspace = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")

    def launch(ops: Operands, stream: int) -> int:
        a, b, c = _ptrs(ops, layout)
        return library.launch(
            a, b, c, problem.m, problem.n, problem.k, workspace.data_ptr(), stream
        )

    return Runner(name, "candidate", layout, launch, {"library": str(library.path)})


def autotune_cache_path(
    config: EngineConfig, environment_key: str, l2_flush: str = "write"
) -> Path:
    """One file per environment (GPU, driver, CUDA, cuBLASLt: GpuEnvironment.key) in the engine's
    cache, shared by every process with the same ENGINE_CACHE_DIR (the GPU-step children get the
    worker's: engine.isolation.sandbox.candidate_env): a shape is autotuned once, not per step.
    Choices timed after another L2 flush (engine.timing.protocols.Bench) keep a file of their
    own, so that neither protocol runs the other's pick."""
    flush = "" if l2_flush == "write" else f"_{l2_flush}_flush"
    return config.baseline_cache / f"cublaslt_autotune_{environment_key}{flush}.json"


def autotune_key(problem: Problem, layout: Layout) -> str:
    return f"{problem.shape}_{layout.value}"


def read_autotune_cache(cache: Path | None) -> dict[str, Any]:
    """The cached choices, or {} for no file, a torn one or one that is not ours (tune again)."""
    if cache is None:
        return {}
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def autotune_cached(
    cache: Path | None, problem: Problem, layouts: Sequence[Layout] = (Layout.NN, Layout.TN)
) -> bool:
    """Whether every layout's choice for ``problem`` is in ``cache`` (no autotuning to time)."""
    stored = read_autotune_cache(cache)
    return all(autotune_key(problem, layout) in stored for layout in layouts)


def store_autotune(cache: Path, key: str, report: dict[str, Any]) -> None:
    """Adds one choice to ``cache``: read again just before (another process may have added
    shapes since), written whole to a temporary file and renamed over, so a reader never sees
    half a file."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    stored = read_autotune_cache(cache)
    stored[key] = report
    fd, tmp = tempfile.mkstemp(prefix=f".{cache.name}.", dir=cache.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(stored, f, indent=1)
        os.replace(tmp, cache)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def lt_kernel(shim: BaselineLibrary, plan: int, algo: int) -> dict[str, Any] | None:
    """What algorithm ``algo`` of ``plan`` runs (tile, stages, cluster, split-K, …; see
    engine.timing.cublaslt_kernels), named with the enumerations of the cublasLt.h the shim was
    built against; None when the shim cannot say."""
    try:
        values = shim.cublaslt_algo_config(plan, algo, len(cublaslt_kernels.CONFIG_ATTRIBUTES))
    except LoadError:
        return None
    try:
        enums = cublaslt_kernels.load_enums(find_cublas().include_dir)
    except CublasNotFound:
        enums = None
    return cublaslt_kernels.describe(values, enums).to_dict()


def with_kernels(
    report: dict[str, Any], shim: BaselineLibrary, plan: int, algo: int
) -> dict[str, Any]:
    """``report`` with the kernels of the autotuned pick and of the heuristic's first choice."""
    return {
        **report,
        "kernel": lt_kernel(shim, plan, algo),
        "heuristic_kernel": lt_kernel(shim, plan, 0),
    }


def autotune(
    bench: Bench, shim: BaselineLibrary, layout: Layout, *, cache: Path | None = None
) -> tuple[int, int, dict[str, Any]]:
    """Times up to 100 heuristic algorithms (device protocol); returns (plan, best algo, report).

    The choice is cached per (shape, layout, environment) in ``cache`` when given.
    """
    p = bench.problem
    plan, count = shim.cublaslt_plan(
        p.m, p.n, p.k, layout is Layout.TN, LT_WORKSPACE_BYTES, AUTOTUNE_MAX_ALGOS
    )
    key = autotune_key(p, layout)
    stored = read_autotune_cache(cache)
    if key in stored and stored[key]["algo"] < count:
        algo = int(stored[key]["algo"])
        return plan, algo, with_kernels({**stored[key], "cached": True}, shim, plan, algo)
    runners = [
        cublaslt_runner(shim, plan, i, layout, "cublaslt_candidate", f"algo{i}")
        for i in range(count)
    ]
    bench.warm_up(runners, calls=1)
    # measured (bench/results/2026-12-02-h200-harness-run7): selected cold, algo1 beat algo0 by 1.3
    # % at 1024^3; timed after the heat-up, algo0 was 1.7 % faster. Select in the sustained-load
    # state the timing runs in.
    bench.heat_up(runners, AUTOTUNE_HEAT_SECONDS)
    # measured: with 5-30 reps at 1 % the pick was up to 0.9 % slower than the heuristic's top
    # algorithm at 512^3 and 1024^3, beyond the run-to-run spread; a tighter target fixes that
    result = bench.device(runners, min_reps=20, max_reps=400, target_rel_se=0.002, max_seconds=20)
    medians = {name: s.median for name, s in result.stats.items()}
    best_name = min(medians, key=medians.__getitem__)
    report = {"algo": int(best_name[4:]), "candidates": count, "medians": medians}
    if cache is not None:
        store_autotune(cache, key, report)
    algo = report["algo"]
    return plan, algo, with_kernels({**report, "cached": False}, shim, plan, algo)


def baseline_runners(
    bench: Bench,
    shim: BaselineLibrary,
    *,
    layouts: Sequence[Layout] = (Layout.NN, Layout.TN),
    autotune_cache: Path | None = None,
    extra: Sequence[str] = (),
) -> tuple[list[Runner], dict[str, Any]]:
    """Every baseline in every layout, plus the autotuning report; ``extra``: the torch-tuned
    baselines to add (engine.timing.baseline_names.TORCH_TUNED), tuned now on the bench's stream."""
    p = bench.problem
    runners: list[Runner] = []
    reports: dict[str, Any] = {}
    for layout in layouts:
        runners.append(torch_runner(p, layout))
        runners.append(cublas_runner(shim, p, layout))
        plan, count = shim.cublaslt_plan(p.m, p.n, p.k, layout is Layout.TN, LT_WORKSPACE_BYTES, 1)
        if count:
            runners.append(
                cublaslt_runner(
                    shim,
                    plan,
                    0,
                    layout,
                    "cublaslt_heuristic",
                    f"cublaslt_heuristic_{layout.value}",
                )
            )
        plan, algo, report = autotune(bench, shim, layout, cache=autotune_cache)
        reports[f"cublaslt_autotune_{layout.value}"] = report
        runners.append(
            cublaslt_runner(
                shim, plan, algo, layout, "cublaslt_autotune", f"cublaslt_autotune_{layout.value}"
            )
        )
    if extra:
        from engine.timing.torch_baselines import torch_tuned_runners

        tuned, tuned_reports = torch_tuned_runners(
            p, bench.operand_sets[0], tuple(extra), tuple(layouts), stream=bench.stream
        )
        runners += tuned
        reports.update(tuned_reports)
    return runners, reports


def best_of_layouts(medians: dict[str, float]) -> dict[str, dict[str, Any]]:
    """For each baseline, the faster layout: {baseline: {"seconds": t, "layout": "nn"}}.

    The autotuned pick is re-checked against the heuristic's top algorithm (one of the candidates
    it chose from) timed in the same run, and the faster of the two stands, with ``"choice":
    "heuristic"`` when it was the heuristic's: a pick made in a short selection run was up to
    2 % slower in a later one (NOTES §3), and a baseline must never be weaker than the library can
    be configured to be."""
    best: dict[str, dict[str, Any]] = {}
    for baseline in BASELINES:
        options = {
            layout: _layout_seconds(medians, baseline, layout)
            for layout in ("nn", "tn")
            if f"{baseline}_{layout}" in medians
        }
        if options:
            layout = min(options, key=lambda lay: options[lay][0])
            seconds, choice = options[layout]
            best[baseline] = {"seconds": seconds, "layout": layout}
            if choice:
                best[baseline]["choice"] = choice
    return best


def _layout_seconds(medians: dict[str, float], baseline: str, layout: str) -> tuple[float, str]:
    seconds = medians[f"{baseline}_{layout}"]
    heuristic = medians.get(f"cublaslt_heuristic_{layout}")
    if baseline == "cublaslt_autotune" and heuristic is not None and heuristic < seconds:
        return heuristic, "heuristic"
    return seconds, ""
