"""``python -m engine replay``: every search strategy against recorded GPU measurements, on CPU."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.campaign.replay_benchmark import (
    STRATEGIES,
    VARIANTS,
    default_tables,
    format_table,
    replay_benchmark,
    write_plot,
    write_report,
)
from engine.execution.executor import ReplayTable
from engine.propose.policy import Policy, policy_families


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay benchmark: search strategies against a recorded table (held-out shapes)",
    )
    parser.add_argument(
        "--table",
        action="append",
        type=Path,
        help="sweep report(s) to replay (default: the 2026-12-03 H200 library sweep)",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=32, help="candidates per campaign")
    parser.add_argument("--batch", type=int, default=4, help="candidates per round")
    parser.add_argument("--pretrain-steps", type=int, default=200)
    parser.add_argument("--baseline", default="cublaslt_autotune")
    parser.add_argument("--shapes", help="comma-separated MxNxK shapes to hold out (default all)")
    parser.add_argument(
        "--variants",
        default="online",
        help=f"from {','.join(VARIANTS)}: rounds of --batch with the policy learning after each "
        "(online) or frozen, or the whole budget in one round (one-shot); several: compared",
    )
    parser.add_argument(
        "--target",
        type=float,
        default=0.95,
        help="the share of the table's optimum a run must reach (candidates to it are counted)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        help="start every rl run from this saved policy (e.g. engine/propose/pretrained/sm_90.pt, "
        "trained on the other tables) instead of pretraining on the table's other shapes",
    )
    parser.add_argument("--out", type=Path, default=Path("replay.json"), help="report JSON")
    parser.add_argument("--plot", type=Path, help="PNG (default: the report's name, .png)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tables = args.table or default_tables()
    if not tables:
        raise SystemExit("error: no replay table found; pass --table FILE")
    for path in tables:
        if not Path(path).is_file():
            raise SystemExit(f"error: no such table: {path}")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise SystemExit(f"error: unknown strategies {unknown}: expected {sorted(STRATEGIES)}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if set(variants) - set(VARIANTS) or not variants:
        raise SystemExit(f"error: --variants must be from {list(VARIANTS)}")
    table = ReplayTable.load(tables)
    start_policy = None
    if args.policy is not None:
        start_policy = Policy.load(args.policy, policy_families(table.arch))
        if start_policy is None:
            raise SystemExit(f"error: {args.policy} holds no policy for {table.arch}'s space")
    report = replay_benchmark(
        table,
        strategies=strategies,
        seeds=args.seeds,
        budget=args.budget,
        batch_size=args.batch,
        pretrain_steps=args.pretrain_steps,
        baseline=args.baseline,
        shapes=args.shapes.split(",") if args.shapes else None,
        variants=variants,
        target=args.target,
        start_policy=start_policy,
        progress=lambda msg: print(msg, flush=True),
    )
    print(format_table(report))
    write_report(report, args.out)
    print(f"report: {args.out}")
    plot = args.plot or args.out.with_suffix(".png")
    if write_plot(report, plot):
        print(f"plot: {plot}")
    else:
        print("plot: skipped (matplotlib is not installed)")
    return 0
