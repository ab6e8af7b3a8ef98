"""Issue 11's 64 shapes: a fixed, stratified sample of CUDA-L2's 10×10×10 grid.

Each size class of engine.report (small: MNK < 2^30, medium, large: MNK ≥ 2^36) gets a third of
the shapes, drawn with a fixed seed, so every session resumes the same campaign; every fourth shape
is also run in the TN layout.

    python bench/grid64.py nn    # the 64 shapes, comma separated (for --shapes)
    python bench/grid64.py tn    # the 16 of them also run as TN
"""

from __future__ import annotations

import itertools
import random
import sys

from engine.report import SIZE_CLASSES, size_class

SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)  # CUDA-L2's grid per dimension
SEED = 11  # the number; changing it starts a different campaign


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


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("nn", "tn"):
        print("usage: python bench/grid64.py nn|tn", file=sys.stderr)
        return 2
    print(",".join(f"{m}x{n}x{k}" for m, n, k in shapes_for(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
