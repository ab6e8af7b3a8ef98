"""``python -m engine pretrain-policy``: the shipped per-arch policy, trained on what we measured.

Reads every sweep table under bench/results (bench/family_sweep.py's format: dense, each config
timed on each shape; the arch from its environment) and every campaign file (SQLite: the
candidates a search measured; campaigns replayed from a table, named ``replay-…``, are left out as
copies of it), fits a fresh policy per arch to them (engine.propose.policy.Policy.pretrain) and
writes engine/propose/pretrained/<arch>.pt, which campaigns start from where no policy of theirs
is saved yet. Run it again after a new table is recorded or a family's knobs change (a policy for
another knob space is ignored on load).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path

from engine.campaign.executor import ReplayTable
from engine.campaign.space import SearchSpace
from engine.campaign.storage import SqliteStorage
from engine.codegen import get_family
from engine.outcomes import CandidateStatus
from engine.problem import Problem
from engine.propose.policy import PRETRAINED_DIR, Policy, policy_families

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
Task = tuple[Problem, SearchSpace, Mapping[str, float]]


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


def sweep_tables(results: Path) -> list[Path]:
    """JSON files holding a sweep (``configs`` and ``sweep``), in name order."""
    import json

    out = []
    for path in sorted(results.rglob("*.json")):
        try:
            head = path.read_text()
        except OSError:
            continue
        if '"sweep"' not in head or '"configs"' not in head:
            continue
        try:
            data = json.loads(head)
        except ValueError:
            continue
        if isinstance(data, dict) and "configs" in data and "sweep" in data:
            out.append(path)
    return out


def table_tasks(path: Path, baseline: str) -> tuple[str, list[Task]]:
    """(arch, one task per recorded problem) of a sweep table."""
    table = ReplayTable.load([path])
    tasks: list[Task] = []
    for problem in table.problems():
        space = SearchSpace.from_configs(problem, table.configs_for(problem))
        try:
            speedups = table.speedups(problem, baseline)
        except KeyError:  # no time of this baseline for the problem
            continue
        rewards = {n: math.log(s) for n, s in speedups.items() if s > 0 and n in space}
        if rewards:
            tasks.append((problem, space, rewards))
    return table.arch, tasks


def campaign_tasks(path: Path, baseline: str) -> list[Task]:
    """One task per problem of each searched (not replayed) campaign in a SQLite file: the
    measured candidates whose knobs this engine still renders."""
    storage = SqliteStorage(path)
    tasks: list[Task] = []
    try:
        for name in storage.campaign_names():
            if name.startswith("replay-"):
                continue
            for problem in storage.problems(name):
                configs, rewards = [], {}
                for record in storage.candidates(name, problem.key):
                    speedup = record.speedups().get(baseline)
                    if (
                        record.status != CandidateStatus.OK
                        or not speedup
                        or record.source is not None
                    ):
                        continue
                    try:
                        config = get_family(record.family).from_knobs(dict(record.knobs))
                    except (KeyError, ValueError, TypeError):
                        continue
                    if config.name != record.name:
                        continue
                    configs.append(config)
                    rewards[config.name] = math.log(speedup)
                space = SearchSpace.from_configs(problem, configs)
                rewards = {n: r for n, r in rewards.items() if n in space}
                if rewards:
                    tasks.append((problem, space, rewards))
    finally:
        storage.close()
    return tasks


def shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def fits(policy: Policy, task: Task) -> bool:
    return all(c.FAMILY in policy.families for c in task[1].configs)


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
    return 0
