"""``python -m engine pretrain-policy``: the shipped per-arch policy, trained on what we measured.

Reads every sweep table under bench/results (bench/family_sweep.py's format: dense, each config
timed on each shape; the arch from its environment), every speedup table (bench/triton_bench.py's
and the split-K benches' format: each config's speedup over the baseline per shape, measured in
one session) and every campaign file (SQLite: the candidates a search measured; campaigns
replayed from a table, named ``replay-…``, are left out as copies of it), fits a fresh policy per
arch to them (engine.propose.policy.Policy.pretrain: logits no recorded config uses start at the
mean of the trained ones) and writes engine/propose/pretrained/<arch>.pt, which campaigns start
from where no policy of theirs is saved yet. Beside it, engine/propose/pretrained/
cublaslt_kernels.json: every cuBLASLt kernel recorded under bench/results, where the seed
proposer starts CUTLASS on a shape whose own kernels it does not know yet. Run it again after a
new table is recorded or a family's knobs change (a policy for another knob space is ignored on
load).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.campaign.pretraining import (
    Task,
    campaign_tasks,
    cublaslt_kernel_files,
    fits,
    recorded_cublaslt_kernels,
    speedup_table_tasks,
    speedup_tables,
    sweep_tables,
    table_tasks,
)
from engine.propose.policy import PRETRAINED_DIR, Policy, policy_families
from engine.propose.seed import RECORDED_KERNELS, recorded_kernels_document

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pretrain-policy",
        aliases=["pretrain_policy"],  # the module's name, as engine.cli.COMMAND_MODULES lists it
        help="train the shipped per-arch policy on every recorded table under bench/results",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder searched for tables")
    parser.add_argument("--out-dir", type=Path, default=PRETRAINED_DIR)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--baseline", default="cublaslt_autotune")
    parser.add_argument(
        "--campaign-arch",
        default="sm_90",
        help="the arch of the campaign files found (they do not record it; every campaign under "
        "bench/results ran on the H200)",
    )
    parser.set_defaults(func=run)


def shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def run(args: argparse.Namespace) -> int:
    by_arch: dict[str, list[Task]] = {}
    sources: dict[str, list[str]] = {}
    for path in sweep_tables(args.results):
        try:
            arch, tasks = table_tasks(path, args.baseline)
        except (KeyError, ValueError) as exc:  # a table this engine no longer renders
            print(f"skipped {shown(path)}: {exc}")
            continue
        by_arch.setdefault(arch, []).extend(tasks)
        sources.setdefault(arch, []).append(f"{shown(path)} ({len(tasks)} problems)")
    for path in speedup_tables(args.results):
        arch, tasks, unknown = speedup_table_tasks(path, args.baseline)
        if not tasks:
            print(f"skipped {shown(path)}: no speedups over {args.baseline}")
            continue
        by_arch.setdefault(arch, []).extend(tasks)
        left_out = f", {unknown} configs this engine does not know left out" if unknown else ""
        sources.setdefault(arch, []).append(f"{shown(path)} ({len(tasks)} problems{left_out})")
    for path in sorted(args.results.rglob("*.sqlite")):
        tasks = campaign_tasks(path, args.baseline)
        if tasks:
            by_arch.setdefault(args.campaign_arch, []).extend(tasks)
            sources.setdefault(args.campaign_arch, []).append(
                f"{shown(path)} ({len(tasks)} problems)"
            )
    if not by_arch:
        raise SystemExit(f"error: no recorded table under {args.results}")
    for arch, tasks in sorted(by_arch.items()):
        policy = Policy(policy_families(arch), seed=0)
        kept = [t for t in tasks if fits(policy, t)]
        curve = policy.pretrain(kept, steps=args.steps)
        policy.trained_on = sources[arch]
        out = args.out_dir / f"{arch}.pt"
        policy.save(out)
        print(
            f"{arch}: {len(kept)} recorded problems ({len(tasks) - len(kept)} of other families "
            f"left out), {args.steps} steps, mean centred expected reward "
            f"{curve[0] if curve else 0:+.4f} → {curve[-1] if curve else 0:+.4f}; space "
            f"{policy.space_id}; {out} ({out.stat().st_size} bytes)"
        )
        for source in sources[arch]:
            print(f"  {source}")
    write_recorded_kernels(args.results, args.out_dir / RECORDED_KERNELS.name)
    return 0


def write_recorded_kernels(results: Path, out: Path) -> None:
    """Every cuBLASLt kernel recorded under ``results``, for the seed proposer."""
    files = cublaslt_kernel_files(results)
    targets = recorded_cublaslt_kernels(files)
    document = recorded_kernels_document(targets, sources=[shown(p) for p in files])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"cuBLASLt's kernels of {len(document['kernels'])} problems: {out}")
