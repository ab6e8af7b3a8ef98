"""Nsight Compute on longk kernels and on torch.matmul (cuBLAS) for the same shapes: DRAM
throughput, achieved occupancy, L2 hit rate, warp stall reasons (GPU only; ncu must be on PATH).

    python3 bench/longk_profile.py --out DIR
        [--pairs SHAPE/TILE_N/STAGES/SPLITS/SWAP[/CTAS_PER_SM],...] [--best-of longk.json]
        [--shapes N]

Each pair names a shape (NN) and a longk config (``--best-of``: the fastest longk config of
each of the first N shapes of a bench/longk_bench.py report); the kernel is built (or found in
the cache), run under ``ncu --clock-control none`` (caches flushed before each profiled
launch, ncu's default) with fresh random inputs, and the same shape is profiled through
torch.matmul. One text report per run under DIR, and a summary (the metrics above, per
kernel) in DIR/longk-profile.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PAIRS = "128x128x16384/32/6/16/0,512x256x8192/64/6/4/0"
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "WarpStateStats", "LaunchStats")
METRICS = {  # what the summary keeps: label -> the report line's name
    "duration_us": "Duration",
    "dram_throughput_pct": "DRAM Throughput",
    "memory_throughput_pct": "Memory Throughput",
    "compute_sm_throughput_pct": "Compute (SM) Throughput",
    "l2_hit_rate_pct": "L2 Hit Rate",
    "achieved_occupancy_pct": "Achieved Occupancy",
    "registers": "Registers Per Thread",
    "grid_size": "Grid Size",
    "cluster_size": "Cluster Size",
}


def run_kernel(target: str, shape: str, reps: int) -> None:
    """The profiled process: ``target`` is a library path or ``torch``."""
    import torch

    from engine.problem import Problem

    problem = Problem.parse(shape)
    a = torch.randn(problem.m, problem.k, device="cuda").half()
    b = torch.randn(problem.k, problem.n, device="cuda").half()
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
    if target == "torch":
        for _ in range(reps):
            torch.matmul(a, b, out=c)
    else:
        from engine.gpu.runtime import KernelLibrary

        kernel = KernelLibrary(target)
        stream = torch.cuda.current_stream().cuda_stream
        size = kernel.workspace_size(problem.m, problem.n, problem.k)
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
        for _ in range(reps):
            error = kernel.launch(
                a.data_ptr(),
                b.data_ptr(),
                c.data_ptr(),
                problem.m,
                problem.n,
                problem.k,
                workspace.data_ptr() if size else 0,
                stream,
            )
            assert error == 0, error
    torch.cuda.synchronize()


def summarise(report: str) -> dict[str, float]:
    """The METRICS of the last profiled kernel in an ncu text report, and its stall reasons."""
    out: dict[str, float] = {}
    for label, line in METRICS.items():
        found = re.findall(rf"^\s*{re.escape(line)}\s+(\S+)\s+([\d.,]+)\s*$", report, re.M)
        if found:
            unit, value = found[-1]
            number = float(value.replace(",", ""))
            out[label] = number / 1000 if unit == "ns" and label == "duration_us" else number
    return out


def profile(target: str, shape: str, out: Path, tag: str) -> dict[str, object]:
    command = [
        "ncu",
        "--clock-control",
        "none",
        "--launch-skip",
        "2",
        "--launch-count",
        "1",
        *(arg for s in SECTIONS for arg in ("--section", s)),
        "--metrics",
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard,"
        "smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,"
        "smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle",
        sys.executable,
        __file__,
        "--run",
        target,
        "--shape",
        shape,
    ]
    # only the GEMM, not the kernels that draw the inputs
    names = "regex:gemm|Kernel|sm90|cutlass" if target == "torch" else "regex:gemm_kernel"
    command[3:3] = ["--kernel-name", names]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    text = result.stdout + result.stderr
    (out / f"ncu-{tag}.txt").write_text(text)
    return {"shape": shape, "target": tag, "rc": result.returncode, **summarise(text)}


def config_of(pair: str) -> tuple[str, Any]:
    """(SHAPE, the NN LongKConfig) of SHAPE/TILE_N/STAGES/SPLITS/SWAP[/CTAS_PER_SM[/GROUPS
    [/MULTICAST[/REDUCE[/INTERLEAVE[/EVICT_FIRST_A]]]]]] (CTAS_PER_SM 0, as many as fit, GROUPS
    and MULTICAST 1, REDUCE pull, INTERLEAVE and EVICT_FIRST_A 0 when left off)."""
    from engine.codegen import LongKConfig
    from engine.problem import Layout

    fields = pair.split("/")
    fields += ["0", "1", "1", "pull", "0", "0"][len(fields) - 5 :]
    shape, tile_n, stages, splits, swap, occupancy, groups, multicast, reduce, *flags = fields
    interleave, evict_first_a = flags
    return shape, LongKConfig(
        layout=Layout.NN,
        tile_n=int(tile_n),
        stages=int(stages),
        splits=int(splits),
        swap=swap == "1",
        ctas_per_sm=int(occupancy),
        groups=int(groups),
        multicast=int(multicast),
        reduce=reduce,
        interleave=interleave == "1",
        evict_first_a=evict_first_a == "1",
    )


def best_pairs(report: dict, count: int) -> list[str]:
    """The fastest longk config of each of the first ``count`` shapes of a longk_bench report, as
    SHAPE/TILE_N/STAGES/SPLITS/SWAP/CTAS_PER_SM/GROUPS."""
    pattern = re.compile(
        r"hgemm_longk_(\d+)x(\d+)x64_s(\d+)_nn_cluster(\d+)(?:_g(\d+))?(_swap)?(?:_occ(\d))?$"
    )
    pairs = []
    for shape in report.get("shapes", [])[:count]:
        speedups = shape.get("speedups", {})
        ranked = sorted((n for n in speedups if pattern.match(n)), key=speedups.get, reverse=True)
        if not ranked:
            continue
        tm, tn, stages, splits, groups, swap, occupancy = pattern.match(ranked[0]).groups()
        tile_n = tm if swap else tn
        problem = shape["problem"].split("_")[0]  # "128x128x16384_nn"
        swapped = 1 if swap else 0
        pairs.append(
            f"{problem}/{tile_n}/{stages}/{splits}/{swapped}/{occupancy or 0}/{groups or 1}"
        )
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--pairs", default=DEFAULT_PAIRS)
    parser.add_argument("--best-of", type=Path, help="a longk_bench.py report")
    parser.add_argument("--shapes", type=int, default=3, help="with --best-of: how many")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        run_kernel(args.run, args.shape, args.reps)
        return 0

    from engine.compilation.compile import compile_configs

    args.out.mkdir(parents=True, exist_ok=True)
    pairs = args.pairs.split(",")
    if args.best_of and args.best_of.exists():
        pairs = best_pairs(json.loads(args.best_of.read_text()), args.shapes) or pairs
    rows = []
    for pair in pairs:
        shape, config = config_of(pair)
        [built] = compile_configs([config], target_arch="sm_90")
        if not built.ok:
            rows.append({"shape": shape, "target": config.name, "error": built.error})
            continue
        rows.append(profile(str(built.library), shape, args.out, f"{shape}-{config.name}"))
        rows.append(profile("torch", shape, args.out, f"{shape}-torch"))
        for row in rows[-2:]:
            print(json.dumps(row), flush=True)
    (args.out / "longk-profile.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
