"""``python -m engine bench --shape MxNxK``: time every baseline (and a kernel) and write JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.commands.common import (
    add_problem_arguments,
    compile_kernel_file,
    problem_from_args,
    torch_baselines,
)
from engine.problem import Problem
from engine.timing import floor_model
from engine.timing.baseline_names import TORCH_TUNED
from engine.timing.protocol_names import L2_FLUSHES
from engine.timing.tables import format_table, rejected_runners
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
        "--l2-flush",
        choices=L2_FLUSHES,
        default="write",
        help="how L2 is emptied before each timed call: write (zero a 256 MiB buffer, the "
        "device protocol's, which leaves dirty lines the call must write back) or read (sum it, "
        "which leaves clean lines); a speedup that holds only after write is the flush's",
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
    """Measures each shape in turn; the JSON holds every shape measured so far, whatever stops
    the run. Exits 1 when the kernel is rejected, by the verifier or while timed."""
    problems = [problem_from_args(shape, args.layout) for shape in args.shape]
    extra = torch_baselines(args.torch_baselines)  # bad input fails before any file is touched
    records: list[dict] = []
    try:
        return measure_shapes(args, problems, extra, records)
    finally:
        if records:  # a run that measured nothing leaves an earlier results file as it was
            write_records(args.json, records)
            print(f"wrote {args.json} ({len(records)} of {len(problems)} shapes)", file=sys.stderr)


def measure_shapes(
    args: argparse.Namespace, problems: list[Problem], extra: tuple[str, ...], records: list[dict]
) -> int:
    """Appends each shape's record to ``records`` as it is measured; returns the exit status."""
    from engine.timing.measure import measure

    model = floor_model.calibrate() if args.predict else None
    protocols = tuple(args.protocol or ("device", "offline"))
    rejected: list[str] = []
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
            l2_flush=args.l2_flush,
        )
        if model is not None:
            record["prediction"] = {**prediction, "model": model.to_dict()}
        records.append(record)
        write_records(args.json, records)
        print(format_table(record))
        rejected += [
            f"{name} at {problem}: {mark}"
            for name, mark in rejected_runners(record, candidates).items()
        ]
    for line in rejected:
        print(f"error: {line}", file=sys.stderr)
    return 1 if rejected else 0


def write_records(path: Path, records: list[dict]) -> None:
    """The records as JSON, replacing ``path`` whole (a run stopped mid-write leaves the
    previous shapes' file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(records, indent=1, default=str))
    partial.replace(path)
