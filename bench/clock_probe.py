"""Why does cuBLASLt reach less in the device protocol than in bursts? (NOTES §3)

For a few large shapes, times the autotuned cuBLASLt (and torch.matmul) with CUDA events in four
regimes, sampling the SM clock and the power draw with nvidia-smi meanwhile:

  sustained  the device protocol: L2 flushed before each call, calls back to back, after a heat-up
  no_flush   the same without the L2 flush
  rested     a host sync and a 5 ms idle gap before each call (what the offline protocol gives)
  burst      after 1 s idle: 3 warm-up calls, then 10 back-to-back calls timed as one span (the
             way KINDS.md measured 769-798 TFLOP/s for bf16 at 8192^3)

Writes clock_probe.json under --out and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from engine.config import load as load_config
from engine.problem import Problem
from engine.timing import baselines, physics
from engine.timing.measure import load_shim
from engine.timing.protocols import Bench, Runner

SHAPES = ("8192x8192x8192", "4096x4096x4096")
RUNNERS = ("cublaslt_autotune_tn", "cublaslt_autotune_nn", "torch_nn")
SECONDS_PER_REGIME = 2.5


def event_pair() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def timed_calls(bench: Bench, runner: Runner, *, flush: bool, rest: float) -> list[float]:
    """Per-call event times for SECONDS_PER_REGIME of calls."""
    pairs = []
    started = time.monotonic()
    ops = bench.operand_sets[0]
    with torch.cuda.stream(bench.stream):
        while time.monotonic() - started < SECONDS_PER_REGIME:
            if rest:
                bench.stream.synchronize()
                time.sleep(rest)
            if flush:
                bench.flush_l2()
            start, end = event_pair()
            start.record(bench.stream)
            runner(ops, bench.stream)
            end.record(bench.stream)
            pairs.append((start, end))
            if len(pairs) % 50 == 0:
                bench.stream.synchronize()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in pairs]


def burst(bench: Bench, runner: Runner, *, bursts: int = 5) -> list[float]:
    """Mean per-call time of 10 back-to-back calls after 1 s idle and 3 warm-ups, per burst."""
    out = []
    ops = bench.operand_sets[0]
    with torch.cuda.stream(bench.stream):
        for _ in range(bursts):
            torch.cuda.synchronize()
            time.sleep(1.0)
            for _ in range(3):
                runner(ops, bench.stream)
            start, end = event_pair()
            start.record(bench.stream)
            for _ in range(10):
                runner(ops, bench.stream)
            end.record(bench.stream)
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e-3 / 10)
    return out


class ClockSampler:
    """nvidia-smi every 100 ms: SM clock (MHz), power (W), temperature (C), with timestamps."""

    FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [
                "nvidia-smi",
                f"--query-gpu={self.FIELDS}",
                "--format=csv,noheader,nounits",
                "-lms",
                "100",
            ],
            stdout=path.open("w"),
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> list[tuple[dt.datetime, float, float, float]]:
        self.proc.terminate()
        self.proc.wait(timeout=5)
        rows = []
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                when = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
                rows.append((when, float(parts[1]), float(parts[2]), float(parts[3])))
            except (ValueError, IndexError):
                continue
        return rows


def window_summary(rows, start: dt.datetime, end: dt.datetime) -> dict[str, float | None]:
    inside = [r for r in rows if start <= r[0] <= end]
    if not inside:
        return {"sm_mhz": None, "power_w": None, "temperature_c": None, "samples": 0}
    return {
        "sm_mhz": statistics.median(r[1] for r in inside),
        "power_w": statistics.median(r[2] for r in inside),
        "temperature_c": max(r[3] for r in inside),
        "samples": len(inside),
    }


def probe_shape(problem: Problem, shim, rows_sink: list) -> dict:
    bench = Bench(problem, seed=7)
    runners, _ = baselines.baseline_runners(bench, shim)
    chosen = [r for r in runners if r.name in RUNNERS]
    bench.warm_up(chosen)
    bench.heat_up(chosen, 3.0)
    regimes = {
        "sustained": lambda r: timed_calls(bench, r, flush=True, rest=0.0),
        "no_flush": lambda r: timed_calls(bench, r, flush=False, rest=0.0),
        "rested": lambda r: timed_calls(bench, r, flush=True, rest=0.005),
        "burst": lambda r: burst(bench, r),
    }
    result: dict = {}
    for runner in chosen:
        for regime, run in regimes.items():
            start = dt.datetime.now()
            times = run(runner)
            end = dt.datetime.now()
            median = statistics.median(times)
            result[f"{runner.name}/{regime}"] = {
                "median_s": median,
                "tflops": physics.tflops(problem, median),
                "calls": len(times),
                "window": [start.isoformat(), end.isoformat()],
            }
            rows_sink.append((f"{problem.key}/{runner.name}/{regime}", start, end))
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    shim = load_shim(load_config())
    sampler = ClockSampler(args.out / "clock_probe_smi.csv")
    windows: list = []
    report: dict = {"shapes": {}}
    try:
        for shape in args.shapes.split(","):
            problem = Problem.parse(shape)
            report["shapes"][problem.key] = probe_shape(problem, shim, windows)
    finally:
        rows = sampler.stop()
    for key, start, end in windows:
        shape_key, runner, regime = key.split("/")
        report["shapes"][shape_key][f"{runner}/{regime}"]["clocks"] = window_summary(
            rows, start, end
        )
    report["gpu"] = torch.cuda.get_device_name()
    report["date"] = dt.datetime.now().isoformat()
    (args.out / "clock_probe.json").write_text(json.dumps(report, indent=1))
    print(f"{'shape/runner/regime':58} {'µs':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>6}")
    for shape_key, entries in report["shapes"].items():
        for name, entry in entries.items():
            clocks = entry.get("clocks", {})
            print(
                f"{shape_key + '/' + name:58} {entry['median_s'] * 1e6:9.1f} "
                f"{entry['tflops']:8.1f} {clocks.get('sm_mhz') or 0:6.0f} "
                f"{clocks.get('power_w') or 0:6.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
