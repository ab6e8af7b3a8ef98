"""``python -m engine bench --shape MxNxK``: time every baseline (and a kernel) and write JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.commands.common import (
    add_problem_arguments,
    compile_kernel_file,
    problem_from_args,
    torch_baselines,
)
from engine.timing import floor_model
from engine.timing.baseline_names import TORCH_TUNED, tuned_label
from engine.verify.verifier import verify

PROTOCOL_CHOICES = ("device", "offline", "server", "graph")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="time baselines (and a kernel) on the GPU")
    add_problem_arguments(parser, many=True)
    parser.add_argument(
        "--protocol",
        action="append",
        choices=PROTOCOL_CHOICES,
        help="repeatable; default: device and offline",
    )
    parser.add_argument("--kernel", type=Path, help="a .cu file to verify and time as well")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    parser.add_argument(
        "--torch-baselines",
        default=",".join(TORCH_TUNED),
        help="torch-tuned baselines to time too, comma separated (tuned per shape and layout "
        f"in this process); '' for none. Default: {','.join(TORCH_TUNED)}",
    )
    parser.add_argument(
        "--power-seconds",
        type=float,
        default=0.25,
        help="NVML power and SM clock of each runner alone, back to back, for this long "
        "(device protocol; 0: only over the whole run)",
    )
    parser.add_argument(
        "--no-predict",
        dest="predict",
        action="store_false",
        help="skip the floor model (engine.timing.floor_model: calibrated on the GPU first, "
        "about 1 s, "
        "then each shape's device time predicted before it is timed)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.timing.measure import measure

    extra = torch_baselines(args.torch_baselines)
    problems = [problem_from_args(shape, args.layout) for shape in args.shape]
    model = floor_model.calibrate() if args.predict else None
    protocols = tuple(args.protocol or ("device", "offline"))
    records = []
    for problem in problems:
        candidates = {}
        if args.kernel:
            compiled = compile_kernel_file(args.kernel, problem.layout)
            verdict = verify(compiled.library, problem)
            if not verdict.ok:
                print(
                    f"error: {args.kernel} rejected at {problem}: [{verdict.reason}] "
                    f"{verdict.message}",
                    file=sys.stderr,
                )
                return 1
            candidates[args.kernel.stem] = compiled.library
        prediction = floor_model.predict(problem, model).to_dict() if model else None
        record = measure(
            problem,
            candidates=candidates,
            protocols=protocols,
            extra_baselines=extra,
            power_seconds=args.power_seconds,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
        if model is not None:
            record["prediction"] = {**prediction, "model": model.to_dict()}
        records.append(record)
        print(format_table(record))
    args.json.write_text(json.dumps(records, indent=1, default=str))
    print(f"wrote {args.json}")
    return 0


def format_table(record: dict[str, Any]) -> str:
    p = record["problem"]
    lines = [f"\n{p['m']}x{p['n']}x{p['k']} ({p['layout']})  — {record['environment']['gpu_name']}"]
    for protocol, result in record["protocols"].items():
        stat = result["statistic"]
        lines.append(f"  {protocol} protocol ({stat} µs, TFLOP/s):")
        by_runner = result.get("power_by_runner", {})
        for name in sorted(result["seconds"], key=result["seconds"].__getitem__):
            t = result["seconds"][name]
            lines.append(
                f"    {name:28s} {t * 1e6:11.2f} µs {result['tflops'][name]:8.1f}"
                + power_label(by_runner.get(name))
            )
        if "power" in result:
            lines.append(f"    during the run:{power_label(result['power'])}")
        for name, speedups in result["speedups"].items():
            parts = ", ".join(f"{b} {s:.3f}x" for b, s in speedups.items())
            lines.append(f"    speedup of {name}: {parts}")
        if result["impossible"]:
            lines.append(f"    IMPOSSIBLE (below physical floor): {result['impossible']}")
    lines += tuning_lines(record.get("autotune", {}))
    if "prediction" in record and "device" in record["protocols"]:
        lines.append(prediction_line(record))
    return "\n".join(lines)


def prediction_line(record: dict[str, Any]) -> str:
    """The floor model's prediction beside the fastest device-protocol baseline."""
    pred = record["prediction"]
    best = record["protocols"]["device"].get("best_baselines", {})
    line = f"  floor model: {pred['seconds'] * 1e6:.2f} µs ({pred['bound']}-bound)"
    if best:
        name = min(best, key=lambda b: best[b]["seconds"])
        seconds = best[name]["seconds"]
        line += (
            f"; fastest baseline {name} {seconds * 1e6:.2f} µs = {seconds / pred['seconds']:.2f}x"
        )
    return line


def power_label(summary: dict[str, Any] | None) -> str:
    """`` 612 W 1755 MHz`` (NVML means), or '' where nothing was read."""
    if not summary:
        return ""
    parts = []
    if "power_w" in summary:
        parts.append(f"{summary['power_w']['mean']:5.0f} W")
    if "sm_clock_mhz" in summary:
        parts.append(f"{summary['sm_clock_mhz']['mean']:5.0f} MHz")
    if summary.get("power_capped_fraction"):
        parts.append(f"capped {summary['power_capped_fraction']:.0%}")
    return "  " + " ".join(parts) if parts else ""


def tuning_lines(reports: dict[str, Any]) -> list[str]:
    """What the torch-tuned baselines picked and how long they tuned."""
    lines = []
    for name, report in sorted(reports.items()):
        if not name.startswith(TORCH_TUNED) or "tuning_seconds" not in report:
            continue
        label = tuned_label(report) or "nothing recorded"
        timed = f"; {len(report['choices'])} choices timed" if report.get("choices") else ""
        lines.append(f"  {name}: tuned {report['tuning_seconds']:.2f} s, ran {label}{timed}")
    return lines
