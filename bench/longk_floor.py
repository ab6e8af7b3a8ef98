"""How much of a long-K kernel's event time is the launch: an empty kernel, torch.matmul and each
shape's fastest longk kernel timed the same way (L2 zeroed through a 256 MiB buffer before each
call, CUDA events around the call alone, median of interleaved repetitions). GPU only.

    python3 bench/longk_floor.py --best-of longk.json [--reps 400] [--out floor.json]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--best-of", type=Path, required=True, help="a longk_bench.py report")
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("longk-floor.json"))
    args = parser.parse_args(argv)

    import torch

    from bench.longk_profile import best_pairs, config_of
    from engine.compilation.compile import compile_configs
    from engine.gpu.runtime import KernelLibrary
    from engine.problem import Problem

    report = json.loads(args.best_of.read_text())
    stream = torch.cuda.current_stream()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    runners = {"empty kernel": lambda: torch.cuda._sleep(0)}
    for pair in best_pairs(report, len(report.get("shapes", []))):
        shape, config = config_of(pair)
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
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for _ in range(3):
        for fn in runners.values():
            fn()
    torch.cuda.synchronize()
    rng = random.Random(0)
    for _ in range(args.reps // 50):
        pairs = []
        for _ in range(50):
            rng.shuffle(names)
            for name in names:
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record(stream)
                runners[name]()
                end.record(stream)
                pairs.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in pairs:
            samples[name].append(start.elapsed_time(end) * 1e3)
    medians = {name: statistics.median(v) for name, v in samples.items()}
    for name, us in medians.items():
        print(f"{us:8.2f} us  {name}")
    args.out.write_text(json.dumps({"median_us": medians, "reps": args.reps}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
