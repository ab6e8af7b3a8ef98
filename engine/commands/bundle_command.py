"""``python -m engine bundle CAMPAIGN --db campaign.sqlite --out file.zip``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.campaign.storage import SqliteStorage
from engine.codegen import get_family
from engine.compilation.source_kernel import SourceKernel
from engine.execution.final import SavedFinals, sanitizer_passed
from engine.problem import ProblemError
from engine.publish.bundle import best_kernels, bundle_headline, write_bundle


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
    parser.add_argument(
        "--allow-unsanitized",
        action="store_true",
        help="also bundle kernels without a passing compute-sanitizer verdict in the campaign's "
        "finals (<db>.finals.json; for inspection: by default each shape gets its best "
        "sanitized kernel)",
    )
    parser.add_argument(
        "--exact-m",
        action="store_true",
        help="each kernel serves only the M it was measured at (default: per (N, K) the Ms "
        "between measured ones go to the kernel of the measured crossover or nearer M)",
    )
    parser.set_defaults(func=run)


def sanitized_in(finals: Path):
    """Whether a bundle kernel passed compute-sanitizer in the campaign's finals (the verdicts
    engine.execution.final.SavedFinals keeps, by kernel, source and the problems its config was
    sanitized at)."""

    saved = SavedFinals(finals if finals.is_file() else None)

    def admissible(kernel) -> bool:
        return sanitizer_passed(saved, kernel.name, kernel_config(kernel), kernel.problem)

    return admissible


def kernel_config(kernel) -> Any:
    """The config a bundle kernel was rendered from: its family's, or its model-written source."""
    layout = kernel.problem.layout
    if kernel.family is None or kernel.knobs is None:
        return SourceKernel(kernel.source, layout)
    return get_family(kernel.family).from_knobs({**kernel.knobs, "layout": layout.value})


def finals_path(db: Path) -> Path:
    """Where ``engine optimize`` keeps a campaign's finals (and sanitizer verdicts)."""
    return db.with_suffix(".finals.json")


def run(args: argparse.Namespace) -> int:
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
        admissible = None if args.allow_unsanitized else sanitized_in(finals_path(args.db))
        kernels = best_kernels(
            storage,
            args.campaign,
            problems,
            include_slower=args.include_slower,
            admissible=admissible,
            dynamic_m=not args.exact_m,
        )
        summary = bundle_headline(storage, args.campaign, problems, admissible)
        environment = settings.get("environment", {})
    finally:
        storage.close()
    write_bundle(kernels, args.out, environment=environment, title=args.campaign, headline=summary)
    print(
        f"wrote {args.out}: {len(kernels)} of {len(problems)} shapes have a kernel", file=sys.stderr
    )
    return 0
