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
from engine.publish.bundle import (
    CUBLASLT,
    BundleError,
    CampaignResults,
    build_bundle,
    final_algos,
    final_rejections,
    final_sessions,
    has_timed_kernel,
)


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
    """Whether a bundle kernel passed compute-sanitizer in the campaign's finals: a passing
    verdict engine.execution.final.SavedFinals keeps for it (by kernel, source and the problems
    its config was sanitized at), or the one its shape's final summary recorded, which is what
    the dashboard imports (so both bundle the same kernels)."""

    saved = SavedFinals(finals if finals.is_file() else None)
    recorded = {
        key: (entry.get("summary") or {}).get("sanitize") or {}
        for key, entry in saved.data["finals"].items()
    }

    def admissible(kernel) -> bool:
        verdict = recorded.get(kernel.problem.key, {}).get(kernel.name)
        if isinstance(verdict, dict) and verdict.get("ok"):
            return True
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


def saved_finals(finals: Path) -> dict[str, dict]:
    """Problem key → the shape's final summary (engine.execution.final.final_summary), as
    ``engine optimize`` saved it beside the campaign's database."""
    saved = SavedFinals(finals if finals.is_file() else None)
    return {key: entry.get("summary") or {} for key, entry in saved.data["finals"].items()}


def finals_environment(finals: dict[str, dict]) -> dict:
    """The GPU environment the finals measured in (a campaign's settings may not record one)."""
    return next((f["environment"] for f in finals.values() if f.get("environment")), {})


def campaign_results(storage: SqliteStorage, campaign: str, db: Path) -> CampaignResults:
    """What the bundle is made from: the campaign's records and its saved finals."""
    settings = storage.campaign_settings(campaign)
    if settings is None:
        raise SystemExit(f"error: no campaign named {campaign!r} in {db}")
    try:
        problems = tuple(storage.problems(campaign))
    except ProblemError as exc:
        raise SystemExit(f"error: bad problem in the database: {exc}") from None
    finals = saved_finals(finals_path(db))
    return CampaignResults(
        title=campaign,
        problems=problems,
        records={p.key: storage.candidates(campaign, p.key) for p in problems},
        environment=settings.get("environment") or finals_environment(finals),
        rejected_in_finals={k: final_rejections(f) for k, f in finals.items()},
        final_sessions={k: final_sessions(f) for k, f in finals.items()},
        cublaslt_algos=final_algos(problems, finals),
    )


def run(args: argparse.Namespace) -> int:
    if not args.db.is_file():
        raise SystemExit(f"error: no such campaign database: {args.db}")
    storage = SqliteStorage(args.db)
    try:
        results = campaign_results(storage, args.campaign, args.db)
    finally:
        storage.close()
    if not has_timed_kernel(results):
        raise SystemExit(
            f"error: no bundle: no shape of {args.campaign!r} has a verified kernel timed beside "
            "the baselines yet"
        )
    admissible = None if args.allow_unsanitized else sanitized_in(finals_path(args.db))
    try:
        contents = build_bundle(
            results,
            args.out,
            include_slower=args.include_slower,
            admissible=admissible,
            dynamic_m=not args.exact_m,
        )
    except BundleError as exc:
        raise SystemExit(f"error: {exc}") from None
    pinned = sum(k.kind == CUBLASLT for k in contents.kernels)
    print(
        f"wrote {args.out}: {len(contents.kernels) - pinned} of {len(results.problems)} shapes "
        f"have a kernel, {pinned} cuBLASLt's pinned algorithm; {len(contents.left_out)} shape(s) "
        "passed over a better-ranked kernel (README.md says why)",
        file=sys.stderr,
    )
    return 0
