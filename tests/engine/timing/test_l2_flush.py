"""How the device protocol empties L2 before a timed call: by zeroing a buffer four times L2's
size (the default; it leaves dirty lines), or by reading it (clean lines). On a GPU, a read of
A-sized data after each: the zeroing flush's dirty lines must be written back first."""

from __future__ import annotations

import pytest

from engine.problem import Problem
from engine.timing.protocols import Bench


def test_it_refuses_an_unknown_flush_before_touching_the_gpu():
    with pytest.raises(ValueError, match="l2_flush='clean' is not one of"):
        Bench(Problem.parse("64x64x64"), seed=1, l2_flush="clean")


@pytest.mark.gpu
def test_a_read_after_the_zeroing_flush_pays_for_its_dirty_lines():
    import statistics

    import torch

    streamed = torch.ones(64 << 20, dtype=torch.float16, device="cuda")  # 128 MB, as A on long K
    total = torch.empty((), dtype=torch.float32, device="cuda")
    medians = {}
    for flush in ("write", "read"):
        bench = Bench(Problem.parse("64x64x64"), seed=1, timed_checks=False, l2_flush=flush)
        times = []
        for _ in range(30):
            bench.flush_l2()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.sum(streamed, dim=0, dtype=torch.float32, out=total)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        medians[flush] = statistics.median(times)
    # an H100 paid 8-10 us for a 64-137 MB GEMM (bench/results/2026-12-08-h100-longk-flush)
    assert medians["write"] > medians["read"] + 2.0, medians
