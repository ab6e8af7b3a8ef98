"""How much of a long-K kernel's event time is the launch: an empty kernel, torch.matmul and each
shape's fastest longk kernel timed the same way (L2 zeroed through a 256 MiB buffer before each
call, CUDA events around the call alone, median of interleaved repetitions). GPU only.

``--flushes write,read`` times every runner after each way of emptying L2, interleaved: ``write``
zeroes the buffer (the device protocol's flush: L2 is left holding dirty lines, which the timed
call's own misses must write back to DRAM before they can take their place), ``read`` sums it
(L2 is left holding clean lines). The difference is what the protocol's flush adds to a call.

    python3 bench/longk_floor.py (--best-of longk.json | --pairs PAIR,...) [--flushes write,read]
        [--reps 400] [--out floor.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.timing.protocol_names import L2_FLUSHES  # noqa: E402  (no torch: names only)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--best-of", type=Path, help="a longk_bench.py report")
    parser.add_argument("--pairs", help="SHAPE/TILE_N/... as bench/longk_profile.py's")
    parser.add_argument("--flushes", default="write", help="write, read or both, comma-separated")
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("longk-floor.json"))
    args = parser.parse_args(argv)
    modes = args.flushes.split(",")
    if unknown := [m for m in modes if m not in L2_FLUSHES]:
        parser.error(f"--flushes: {unknown} not among {list(L2_FLUSHES)}")

    from bench.longk_profile import best_pairs, config_of

    if args.pairs:
        pairs = args.pairs.split(",")
    elif args.best_of:
        report = json.loads(args.best_of.read_text())
        pairs = best_pairs(report, len(report.get("shapes", [])))
    else:
        parser.error("--best-of or --pairs")
    configs = [config_of(pair) for pair in pairs]  # a malformed pair fails before the GPU work

    import torch

    from engine.compilation.compile import compile_configs
    from engine.gpu.runtime import KernelLibrary
    from engine.problem import Problem

    stream = torch.cuda.current_stream()
    buffer = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    flushes = {
        "write": buffer.zero_,
        "read": lambda: torch.sum(buffer, dim=0, dtype=torch.int64, out=sink),
    }
    runners = {"empty kernel": lambda: torch.cuda._sleep(0)}
    for shape, config in configs:
        problem = Problem.parse(shape)
        a = torch.randn(problem.m, problem.k, device="cuda").half()
        b = torch.randn(problem.k, problem.n, device="cuda").half()
        c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
        [built] = compile_configs([config], target_arch="sm_90")
        kernel = KernelLibrary(str(built.library))
        size = kernel.workspace_size(problem.m, problem.n, problem.k)
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
        workspace_ptr = workspace.data_ptr() if size else 0

        def launch(kernel=kernel, a=a, b=b, c=c, p=problem, w=workspace_ptr) -> None:
            kernel.launch(
                a.data_ptr(), b.data_ptr(), c.data_ptr(), p.m, p.n, p.k, w, stream.cuda_stream
            )

        runners[f"{shape} {config.name}"] = launch
        runners[f"{shape} torch.matmul"] = lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)
    timed = [(name, mode) for name in runners for mode in modes]
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in timed}
    for _ in range(3):
        for fn in runners.values():
            fn()
    torch.cuda.synchronize()
    rng = random.Random(0)
    for _ in range(args.reps // 50):
        events = []
        for _ in range(50):
            rng.shuffle(timed)
            for name, mode in timed:
                flushes[mode]()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record(stream)
                runners[name]()
                end.record(stream)
                events.append(((name, mode), start, end))
        torch.cuda.synchronize()
        for key, start, end in events:
            samples[key].append(start.elapsed_time(end) * 1e3)
    medians = {
        name: {mode: statistics.median(samples[name, mode]) for mode in modes} for name in runners
    }
    print("  ".join(f"{mode + ' flush':>12}" for mode in modes) + "  runner")
    for name, by_mode in medians.items():
        print("  ".join(f"{by_mode[mode]:9.2f} us" for mode in modes) + f"  {name}")
    if len(modes) == 1:  # one flush: one median per runner, as the report was before flushes
        medians = {name: by_mode[modes[0]] for name, by_mode in medians.items()}
    args.out.write_text(
        json.dumps({"median_us": medians, "flushes": modes, "reps": args.reps}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
