"""Shapes no recorded table holds, drawn with a fixed seed: a replay table for an honest test.

The pool is the CUDA-L2 grid ({64, 128, …, 16384}³, 1000 shapes) less every shape of every sweep
table and campaign file under bench/results (either layout). Prints the drawn shapes, comma
separated, in the order drawn (bench/family_sweep.py --shapes takes them).

    python3 bench/fresh_shapes.py --count 16 --seed 2031
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.campaign.pretraining import sweep_tables  # noqa: E402
from engine.campaign.storage import SqliteStorage  # noqa: E402
from engine.execution.executor import ReplayTable  # noqa: E402

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)


def recorded_shapes(results: Path) -> set[str]:
    """Every MxNxK in a sweep table or a campaign file under ``results``."""
    seen: set[str] = set()
    for path in sweep_tables(results):
        seen.update(key.rsplit("_", 1)[0] for key in ReplayTable.load([path]).seconds)
    for path in results.rglob("*.sqlite"):
        storage = SqliteStorage(path)
        try:
            for name in storage.campaign_names():
                seen.update(p.shape for p in storage.problems(name))
        finally:
            storage.close()
    return seen


def fresh_shapes(results: Path, *, count: int, seed: int) -> list[str]:
    seen = recorded_shapes(results)
    pool = [f"{m}x{n}x{k}" for m in GRID for n in GRID for k in GRID]
    pool = [s for s in pool if s not in seen]
    return random.Random(seed).sample(pool, count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--seed", type=int, default=2031)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    print(",".join(fresh_shapes(args.results, count=args.count, seed=args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
