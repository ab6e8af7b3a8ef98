"""``python -m engine floor RESULTS.json``: the floor model's prediction beside the measured
device times of `engine bench`'s records (or any list of measure() records)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.timing import floor_model


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "floor", help="predicted device time (floor model) vs measured, per shape"
    )
    parser.add_argument("results", type=Path, help="engine bench's JSON (a list of records)")
    parser.add_argument("--protocol", default="device")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data = json.loads(args.results.read_text())
    records = data if isinstance(data, list) else data.get("records", [])
    models = [r["prediction"]["model"] for r in records if "prediction" in r]
    if not models:
        raise SystemExit(
            f"error: {args.results} holds no floor model (run engine bench without --no-predict)"
        )
    model = floor_model.FloorModel.from_dict(models[0])
    rows = floor_model.compare(floor_model.records_rows(records, args.protocol), model)
    print(
        f"floor model ({model.source}): launch {model.launch_s * 1e6:.2f} µs, DRAM latency "
        f"{model.dram_latency_s * 1e6:.2f} µs, {model.bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
        f"{model.tensor_flops_per_s / 1e12:.0f} TFLOP/s"
    )
    print(floor_model.format_comparison(rows))
    return 0
