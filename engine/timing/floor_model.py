"""A floor model for a problem's device time, predicted before it is timed.

A latency-bound GEMM (device time under ~15 µs) cannot finish sooner than a launch, one DRAM
round trip for its first operand tiles, and then either moving its bytes at the copy bandwidth
or doing its FLOPs at the tensor rate:

    predicted = launch + dram_latency + max(bytes / bandwidth, flops / tensor_rate)

Every term is measured on the card in the same session (:func:`calibrate`), the way the bench
times kernels (CUDA events, L2 flushed before each call, median): the launch is a one-element
fill, the DRAM latency a one-element copy from flushed memory less the launch, the bandwidth a
256 MB copy, the tensor rate the fastest of torch.mm at a few compute-bound shapes (what the card
sustains, not the datasheet). ``bound`` names the term that dominates. Compared with the best
measured time of a shape (:func:`compare`), the ratio says how much of a kernel's time is above
the floor.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from engine.problem import Layout, Problem

CALIBRATION_REPS = 50
COPY_BYTES = 256 << 20
# The tensor rate is the fastest of these: 8192³ alone runs power-limited. On an H100 its rate
# (about 750 TFLOP/s) put the floor of 2048×4096×16384 at 367.8 µs where cuBLAS ran it in 353.8 µs
# (777 TFLOP/s; bench/results/2026-12-06-h100-first-gpu-run): a floor above a measured time.
RATE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (8192, 8192, 8192),
    (4096, 4096, 4096),
    (2048, 4096, 16384),
)


@dataclass(frozen=True)
class FloorModel:
    launch_s: float  # device time of a trivial kernel between events
    dram_latency_s: float  # one dependent DRAM read after an L2 flush, launch excluded
    bandwidth_bytes_per_s: float  # device copy bandwidth (bytes read + written per second)
    tensor_flops_per_s: float  # the fastest dense fp16 rate torch.mm sustains at RATE_SHAPES
    source: str = "calibrated"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FloorModel:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Prediction:
    seconds: float
    terms: dict[str, float]  # launch, dram_latency, memory, compute (seconds)
    bound: str  # the term that dominates: "latency", "memory" or "compute"

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "terms": self.terms, "bound": self.bound}


def predict(problem: Problem, model: FloorModel) -> Prediction:
    latency = model.launch_s + model.dram_latency_s
    memory = problem.operand_bytes / model.bandwidth_bytes_per_s
    compute = problem.flops / model.tensor_flops_per_s
    terms = {
        "launch": model.launch_s,
        "dram_latency": model.dram_latency_s,
        "memory": memory,
        "compute": compute,
    }
    bound = max(
        (("latency", latency), ("memory", memory), ("compute", compute)), key=lambda kv: kv[1]
    )[0]
    return Prediction(latency + max(memory, compute), terms, bound)


def compare(rows: Iterable[tuple[Problem, float]], model: FloorModel) -> list[dict[str, Any]]:
    """Per problem: the prediction, the measured time and measured / predicted (≥ 1 for a
    floor; below 1 means the model's terms are too large for that problem)."""
    out = []
    for problem, measured in rows:
        p = predict(problem, model)
        out.append(
            {
                "problem": problem.key,
                "predicted_s": p.seconds,
                "measured_s": measured,
                "measured_over_predicted": measured / p.seconds,
                "bound": p.bound,
                "terms": p.terms,
            }
        )
    return out


def format_comparison(rows: list[dict[str, Any]], who: str = "best baseline") -> str:
    lines = [f"{'problem':24s} {'bound':8s} {'predicted µs':>13s} {who + ' µs':>18s} {'ratio':>7s}"]
    for r in rows:
        lines.append(
            f"{r['problem']:24s} {r['bound']:8s} {r['predicted_s'] * 1e6:13.2f} "
            f"{r['measured_s'] * 1e6:18.2f} {r['measured_over_predicted']:7.2f}"
        )
    return "\n".join(lines)


def records_rows(
    records: Iterable[dict[str, Any]], protocol: str = "device"
) -> list[tuple[Problem, float]]:
    """(problem, fastest baseline's time) from measure() records (engine bench's JSON)."""
    rows = []
    for record in records:
        result = record.get("protocols", {}).get(protocol)
        if not result or not result.get("best_baselines"):
            continue
        p = record["problem"]
        problem = Problem(p["m"], p["n"], p["k"], Layout.parse(p["layout"]))
        rows.append((problem, min(b["seconds"] for b in result["best_baselines"].values())))
    return rows


def median_device_time(
    work: Callable[[], None], flush: Callable[[], None], reps: int = CALIBRATION_REPS
) -> float:
    """Median seconds of ``work`` between CUDA events, ``flush`` (L2) before each."""
    import torch

    times = []
    for _ in range(reps):
        flush()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def fastest_rate(seconds_by_shape: dict[tuple[int, int, int], float]) -> float:
    """The highest FLOP rate of the timed (m, n, k) shapes: a floor needs the fastest one."""
    return max(2 * m * n * k / seconds for (m, n, k), seconds in seconds_by_shape.items())


def calibrate(reps: int = CALIBRATION_REPS) -> FloorModel:
    """The model's terms measured on the current GPU (about a second)."""
    import torch

    flush_buffer = torch.empty(COPY_BYTES, dtype=torch.int8, device="cuda")
    src = torch.empty(COPY_BYTES, dtype=torch.int8, device="cuda").random_()
    dst = torch.empty_like(src)

    def flush() -> None:
        flush_buffer.zero_()

    def no_flush() -> None:
        pass

    launch = median_device_time(lambda: dst[:1].zero_(), flush, reps)
    one_read = median_device_time(lambda: dst[:1].copy_(src[-1:]), flush, reps)
    copy = median_device_time(lambda: dst.copy_(src), flush, max(reps // 5, 5))
    mm_seconds = {}
    for m, n, k in RATE_SHAPES:
        a = torch.randn(m, k, dtype=torch.float16, device="cuda")
        b = torch.randn(k, n, dtype=torch.float16, device="cuda")
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        for _ in range(10):  # warm: the rate is the sustained one
            torch.mm(a, b, out=c)
        mm_seconds[(m, n, k)] = median_device_time(
            lambda a=a, b=b, c=c: torch.mm(a, b, out=c), no_flush, max(reps // 5, 5)
        )
    torch.cuda.synchronize()
    return FloorModel(
        launch_s=launch,
        dram_latency_s=max(one_read - launch, 0.0),
        bandwidth_bytes_per_s=2 * COPY_BYTES / copy,
        tensor_flops_per_s=fastest_rate(mm_seconds),
        source=f"calibrated on {torch.cuda.get_device_name()}",
    )
