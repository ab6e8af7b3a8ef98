"""The 64-shape campaign's shapes: a fixed, stratified sample of CUDA-L2's 10×10×10 grid.

Each size class of engine.publish.report (small: MNK < 2^30, medium, large: MNK ≥ 2^36) gets a third
of the shapes, drawn with a fixed seed, so every session resumes the same campaign; every fourth
shape is also run in the TN layout.

    python bench/grid64.py nn    # the 64 shapes, comma separated (for --shapes)
    python bench/grid64.py tn    # the 16 of them also run as TN
    python bench/grid64.py summary DB   # progress so far, from the search-time measurements
    python bench/grid64.py focus DB nn 20   # the 20 NN shapes furthest under cuBLASLt-autotune
    python bench/grid64.py name nn      # the campaign's name (what `optimize --name` reopens)

``focus`` is for a top-up that spends the GPU where the geomean is lost: the shapes whose best
search-time speedup is lowest (below 1), most behind first.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

from engine.campaign.storage import SqliteStorage
from engine.publish.report import SIZE_CLASSES, geomean, size_class

SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)  # CUDA-L2's grid per dimension
SEED = 11  # fixed: changing it starts a different campaign


def grid64() -> list[tuple[int, int, int]]:
    rng = random.Random(SEED)
    by_class: dict[str, list[tuple[int, int, int]]] = {c: [] for c in SIZE_CLASSES}
    for shape in itertools.product(SIZES, repeat=3):
        by_class[size_class(*shape)].append(shape)
    quotas = {"small": 21, "medium": 22, "large": 21}
    chosen = [s for c, shapes in by_class.items() for s in rng.sample(shapes, quotas[c])]
    return sorted(chosen, key=lambda s: (s[0] * s[1] * s[2], s))


def shapes_for(layout: str) -> list[tuple[int, int, int]]:
    shapes = grid64()
    return shapes if layout == "nn" else shapes[::4]


def search_summary(db: Path, baseline: str = "cublaslt_autotune") -> dict[str, Any]:
    """Progress of the campaign in ``db`` from its search-time measurements (short device runs
    inside the campaign process, not the final re-measurements): per shape the candidates,
    failures by reason, and the best verified speedup over ``baseline``."""
    if not db.is_file():  # SqliteStorage would create an empty campaign database there
        raise FileNotFoundError(f"{db}: no campaign database")
    storage = SqliteStorage(db)
    try:
        shapes = []
        for campaign in storage.campaign_names():
            for problem in storage.problems(campaign):
                records = storage.candidates(campaign, problem.key)
                verified = [r for r in records if r.status == "ok" and r.seconds]
                speedups = [
                    r.baselines[baseline] / r.seconds for r in verified if baseline in r.baselines
                ]
                failures: dict[str, int] = {}
                for r in records:
                    if r.status != "ok":
                        failures[r.reason or r.status] = failures.get(r.reason or r.status, 0) + 1
                shapes.append(
                    {
                        "problem": problem.key,
                        "size_class": size_class(problem.m, problem.n, problem.k),
                        "candidates": len(records),
                        "verified": len(verified),
                        "failures": failures,
                        "best_speedup": max(speedups, default=None),
                    }
                )
    finally:
        storage.close()
    best = [s["best_speedup"] for s in shapes if s["best_speedup"]]
    by_class = {
        c: [s["best_speedup"] for s in shapes if s["size_class"] == c and s["best_speedup"]]
        for c in SIZE_CLASSES
    }
    return {
        "baseline": baseline,
        "measurements": "search-time (campaign process, short device runs); not the finals",
        "shapes": shapes,
        "geomean": geomean(best),
        "geomean_by_class": {c: geomean(v) for c, v in by_class.items()},
        "faster_fraction": sum(v > 1 for v in best) / len(best) if best else None,
    }


LARGE_FLOOR = 0.98  # the goal: every large shape at 0.98× cuBLASLt-autotune or better


def focus(db: Path, layout: str, count: int) -> list[str]:
    """Where the campaign's two goals are missed, by the search-time speedups (each shape's best
    verified candidate against cuBLASLt-autotune) of ``layout``'s grid shapes: the ``count``
    slowest of those under 1.0, slowest first, then every other large shape under 0.98.
    ``MxNxK`` each."""
    wanted = {f"{m}x{n}x{k}_{layout}" for m, n, k in shapes_for(layout)}
    shapes = [
        s
        for s in search_summary(db)["shapes"]
        if s["problem"] in wanted and s["best_speedup"] is not None
    ]
    behind = sorted((s["best_speedup"], s["problem"]) for s in shapes if s["best_speedup"] < 1)
    chosen = [key for _, key in behind[:count]]
    chosen += [
        key
        for speedup, key in behind[count:]
        if speedup < LARGE_FLOOR
        and next(s for s in shapes if s["problem"] == key)["size_class"] == "large"
    ]
    return [key.rsplit("_", 1)[0] for key in chosen]


def campaign_name(layout: str) -> str:
    """The name ``engine optimize`` gives the campaign of ``layout``'s grid shapes."""
    from engine.campaign.storage import default_campaign_name
    from engine.problem import Problem

    problems = [Problem(m, n, k, layout) for m, n, k in shapes_for(layout)]
    return default_campaign_name(problems, replay=False)


USAGE = "usage: python bench/grid64.py nn|tn | summary DB | focus DB nn|tn COUNT | name nn|tn"


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "focus" and argv[2] in ("nn", "tn") and argv[3].isdigit():
        try:
            print(",".join(focus(Path(argv[1]), argv[2], int(argv[3]))))
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if len(argv) == 2 and argv[0] == "name" and argv[1] in ("nn", "tn"):
        print(campaign_name(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "summary":
        try:
            print(json.dumps(search_summary(Path(argv[1])), indent=1))
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if len(argv) != 1 or argv[0] not in ("nn", "tn"):
        print(USAGE, file=sys.stderr)
        return 2
    print(",".join(f"{m}x{n}x{k}" for m, n, k in shapes_for(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
