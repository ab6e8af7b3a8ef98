"""``python -m engine bundle CAMPAIGN --db campaign.sqlite --out file.zip``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.problem import ProblemError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bundle", help="zip a campaign's best kernels for PyTorch")
    parser.add_argument("campaign", help="campaign name in the database")
    parser.add_argument("--db", type=Path, required=True, help="the campaign's SQLite file")
    parser.add_argument("--out", type=Path, required=True, help="the zip to write")
    parser.add_argument(
        "--include-slower",
        action="store_true",
        help="also bundle kernels that do not beat torch.matmul (for inspection)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.bundle import best_kernels, bundle_headline, write_bundle
    from engine.campaign.storage import SqliteStorage

    if not args.db.is_file():
        raise SystemExit(f"error: no such campaign database: {args.db}")
    storage = SqliteStorage(args.db)
    try:
        settings = storage.campaign_settings(args.campaign)
        if settings is None:
            raise SystemExit(f"error: no campaign named {args.campaign!r} in {args.db}")
        try:
            problems = storage.problems(args.campaign)
        except ProblemError as exc:
            raise SystemExit(f"error: bad problem in the database: {exc}") from None
        kernels = best_kernels(storage, args.campaign, problems, include_slower=args.include_slower)
        summary = bundle_headline(storage, args.campaign, problems)
        environment = settings.get("environment", {})
    finally:
        storage.close()
    write_bundle(kernels, args.out, environment=environment, title=args.campaign, headline=summary)
    print(
        f"wrote {args.out}: {len(kernels)} of {len(problems)} shapes have a kernel", file=sys.stderr
    )
    return 0
