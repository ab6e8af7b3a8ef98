"""What the checks in the timed calls (engine.verify.timed_checks) cost and whether they
move the baselines, at the 12 harness shapes, in one GPU call.

Per shape, two measurement sessions in this process, in alternating order from shape to shape:
the timing protocols with the checks and without them
(engine.timing.protocols.Bench(timed_checks=False): two operand sets alternating, no poison, no
sampled calls), each with ``--runs`` device runs and the offline protocol, cuBLAS wrapped in the ABI
as a candidate at every shape and the reference kernel where it is quick enough. Per baseline: the
two sessions' device medians, their difference and each session's run-to-run spread; per protocol:
the honest candidates' rejections (there must be none) and what the checks cost. One JSON line per
shape goes to ``--out``/timed_checks.jsonl as soon as it is measured; the summary to
timed_checks.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.device.gpu_run import SHAPES
from engine.config import load as load_config
from engine.problem import Layout, Problem
from engine.timing.measure import load_shim, measure
from engine.verify import harness_kernels

REFERENCE_MAX_FLOPS = 2 * 2048**3  # the simple reference kernel is timed up to 2048³
PROTOCOLS = ("device", "offline")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def session(problem: Problem, candidates: dict[str, Path], checks: bool, args, shim) -> dict:
    started = time.monotonic()
    record = measure(
        problem,
        candidates=candidates,
        protocols=PROTOCOLS,
        shim=shim,
        device_runs=args.runs,
        heat_seconds=args.heat_seconds,
        device_seconds=args.device_seconds,
        probe_overhead=False,
        timed_checks=checks,
    )
    record["wall_s"] = time.monotonic() - started
    return record


def compare(with_checks: dict, without: dict) -> dict[str, Any]:
    """Per runner: both sessions' device medians (median of the runs), the relative move and
    the larger of the two run-to-run spreads; ``within`` when the move is inside it."""
    a = with_checks["protocols"]["device"]
    b = without["protocols"]["device"]
    out = {}
    for name, runs in b["repeat_medians"].items():
        if name not in a["repeat_medians"]:
            continue
        checked, plain = statistics.median(a["repeat_medians"][name]), statistics.median(runs)
        spread = max(a["run_to_run_spread"][name], b["run_to_run_spread"][name])
        move = (checked - plain) / plain
        out[name] = {
            "with_checks_s": checked,
            "without_s": plain,
            "move": move,
            "spread": spread,
            "within": abs(move) <= spread,
        }
    return out


def power_and_clock(record: dict) -> dict[str, float | None]:
    """Mean board power and SM clock over the device protocol's run (NVML; None without it): the
    checks change the duty cycle, which a power-limited GPU answers with its clock."""
    power = record["protocols"]["device"].get("power") or {}
    return {
        "power_w": (power.get("power_w") or {}).get("mean"),
        "sm_clock_mhz": (power.get("sm_clock_mhz") or {}).get("mean"),
    }


def protocol_checks(record: dict, candidates: list[str]) -> dict[str, Any]:
    out = {}
    for protocol, summary in record["protocols"].items():
        checks = summary.get("timed_checks", {})
        out[protocol] = {
            "rejections": {
                n: summary["rejections"][n]
                for n in candidates
                if n in summary.get("rejections", {})
            },
            "baseline_failures": checks.get("baseline_failures", {}),
            "cost": checks.get("cost", {}),
            "tolerance": checks.get("tolerance"),
            "check_errors": checks.get("check_errors", {}),
            "stream_tail_s": checks.get("stream_tail_s", {}),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", help="MxNxK, comma separated (default: the 12 harness shapes)")
    parser.add_argument("--runs", type=int, default=3, help="device runs per session")
    parser.add_argument("--device-seconds", type=float, default=3.0)
    parser.add_argument("--heat-seconds", type=float, default=1.0)
    parser.add_argument("--budget-s", type=float, default=520.0, help="stop starting shapes after")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs must be at least 2: the run-to-run spread needs two runs")
    started = time.monotonic()
    problems = [Problem.parse(s) for s in (args.shapes.split(",") if args.shapes else SHAPES)]
    built = dict(
        zip(
            ("reference", "cublas_wrapped"),
            harness_kernels.build(
                [harness_kernels.REFERENCE, harness_kernels.GOOD_KERNELS / "cublas_wrapped.cu"],
                Layout.NN,
            ),
            strict=True,
        )
    )
    for name, result in built.items():
        assert result.ok, f"{name}: {result.log[-2000:]}"
    shim = load_shim(load_config())
    rows = []
    lines = args.out / "timed_checks.jsonl"
    for index, problem in enumerate(problems):
        if time.monotonic() - started > args.budget_s:
            log(f"budget spent: {len(problems) - index} shapes not measured")
            break
        candidates = {"cublas_wrapped": built["cublas_wrapped"].library}
        if problem.flops <= REFERENCE_MAX_FLOPS:
            candidates["reference"] = built["reference"].library
        order = (True, False) if index % 2 == 0 else (False, True)
        records = {checks: session(problem, candidates, checks, args, shim) for checks in order}
        row = {
            "problem": problem.key,
            "order": ["with_checks" if c else "without" for c in order],
            "wall_s": {
                "with_checks": records[True]["wall_s"],
                "without": records[False]["wall_s"],
            },
            "baselines": compare(records[True], records[False]),
            "power": {
                "with_checks": power_and_clock(records[True]),
                "without": power_and_clock(records[False]),
            },
            "checks": protocol_checks(records[True], list(candidates)),
            "environment": records[True]["environment"],
        }
        rows.append(row)
        with lines.open("a") as out:
            out.write(json.dumps(row, default=str) + "\n")
        moved = [n for n, c in row["baselines"].items() if not c["within"]]
        rejected = {p: c["rejections"] for p, c in row["checks"].items() if c["rejections"]}
        cost = {p: c["cost"].get("per_runner_s") for p, c in row["checks"].items()}
        log(
            f"{problem}: moved beyond spread {moved or 'none'}; honest rejected "
            f"{rejected or 'none'}; checks per runner {cost} s; wall "
            f"{row['wall_s']['with_checks']:.1f} s vs {row['wall_s']['without']:.1f} s"
        )
    summary = {
        "shapes": len(rows),
        "baselines_beyond_spread": {
            r["problem"]: {n: c for n, c in r["baselines"].items() if not c["within"]} for r in rows
        },
        "honest_rejected": {
            r["problem"]: {p: c["rejections"] for p, c in r["checks"].items() if c["rejections"]}
            for r in rows
        },
        "cost_per_runner_s": {
            r["problem"]: {p: c["cost"].get("per_runner_s") for p, c in r["checks"].items()}
            for r in rows
        },
        "rows": rows,
    }
    (args.out / "timed_checks.json").write_text(json.dumps(summary, indent=1, default=str))
    ok = not any(summary["honest_rejected"].values())
    log(f"done: {len(rows)} shapes; honest kernels {'all accepted' if ok else 'REJECTED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
