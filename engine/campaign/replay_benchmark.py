"""The replay benchmark: every search strategy against recorded H200 measurements, on the CPU.

For each held-out shape (leave-one-shape-out: both layouts of the shape are held out), the policy
is pretrained on every other shape of the table, then each strategy runs a campaign against the
ReplayExecutor for each layout of the held-out shape and each seed. A run's curve is the best
speedup found (over the baseline, cuBLASLt-autotune by default) after each candidate, divided by
the best speedup in the table for that problem; "to 95 %" is the number of candidates until that
ratio reaches 0.95.

The default table is the 2026-12-03 H200 library sweep (library-run2.json, which already holds
the first sweep's rows: loading both files would count nothing twice, as rows are keyed by problem,
but adds nothing either): 192 NN configs timed on 24 shapes and 64 TN configs on 4 of them. The
older family-sweep reports (6–24 configs per problem) load the same way through ``--table``."""

from __future__ import annotations

import json
import statistics
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.campaign.loop import Campaign, CampaignSettings
from engine.campaign.storage import SqliteStorage
from engine.execution.executor import ReplayExecutor, ReplayTable
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.propose.mix import DEFAULT_MIX, make_proposers
from engine.propose.policy import InMemoryLearner, Policy, policy_families
from engine.propose.space import SearchSpace

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TABLES = (ROOT / "bench/results/2026-12-03-h200-library/library-run2.json",)
STRATEGIES: dict[str, dict[str, float]] = {
    "random": {"random": 1.0},
    "evolve": {"evolve": 1.0},
    "rl": {"rl": 1.0},
    "transfer": {"transfer": 1.0},
    "rl+transfer": {"rl": 0.5, "transfer": 0.5},
    "rl+evolve": {"rl": 0.5, "evolve": 0.5},
    "rl+evolve+transfer": {"rl": 1 / 3, "evolve": 1 / 3, "transfer": 1 / 3},
    # each family's prior picks in the first round (ranked by the policy), then random
    "seed": {"seed": 1.0},
    # what `engine optimize` and the dashboard run
    "default": dict(DEFAULT_MIX),
}
# the proposers that read the policy (the seed ranks its picks by it)
POLICY_PROPOSERS = frozenset({"rl", "seed"})
TARGET = 0.95
CHECKPOINTS = (1, 2, 4, 8, 16, 32)
# How a strategy spends its budget: in rounds of ``batch_size`` with the policy learning after
# each (online), in the same rounds with the policy frozen, or in one round of the whole budget.
VARIANTS = ("online", "frozen", "one-shot")


def default_tables() -> list[Path]:
    return [p for p in DEFAULT_TABLES if p.is_file()]


def space_of(table: ReplayTable, problem: Problem) -> SearchSpace:
    return SearchSpace.from_configs(problem, table.configs_for(problem))


def pretrained_policy(
    table: ReplayTable, train: Sequence[Problem], *, baseline: str, steps: int, seed: int = 0
) -> Policy:
    """A fresh policy trained on the recorded rewards of ``train``."""
    policy = Policy(policy_families(table.arch), seed=seed)
    tasks = []
    for problem in train:
        space = space_of(table, problem)
        rewards = {name: _log(s) for name, s in table.speedups(problem, baseline).items()}
        tasks.append((problem, space, rewards))
    if steps > 0:
        policy.pretrain(tasks, steps=steps)
    return policy


def table_records(
    table: ReplayTable, problems: Sequence[Problem], *, baseline: str
) -> list[tuple[Problem, CandidateRecord]]:
    """Every recorded config of ``problems`` as a measured candidate (reward: the log speedup
    over ``baseline``): what a transfer proposer knows of the shapes it was not held out on."""
    out = []
    for problem in problems:
        speedups = table.speedups(problem, baseline)
        for config in table.configs_for(problem):
            reward = _log(speedups[config.name])
            out.append(
                (
                    problem,
                    CandidateRecord(
                        config.name,
                        config.FAMILY,
                        config.knobs(),
                        "table",
                        CandidateStatus.OK,
                        reward,
                    ),
                )
            )
    return out


def _log(x: float) -> float:
    import math

    return math.log(x)


def uses_policy(strategy: str) -> bool:
    return bool(POLICY_PROPOSERS & set(STRATEGIES[strategy]))


def campaign_seed(problem: Problem, seed: int) -> int:
    """A seed per (problem, seed index): with one seed for every problem, random search would
    draw the same order of configs on every problem of a table, and its runs would not be
    independent."""
    return zlib.crc32(f"{problem.key}/{seed}".encode())


def run_strategy(
    table: ReplayTable,
    problem: Problem,
    strategy: str,
    *,
    seed: int,
    budget: int,
    batch_size: int,
    baseline: str,
    policy: Policy | None,
    known: Sequence[tuple[Problem, CandidateRecord]] = (),
    online: bool = True,
) -> list[float]:
    """Best-so-far speedup after each candidate of one replayed campaign (``known``: the other
    shapes' results, for a transfer proposer; ``online``: the policy learns after each round)."""
    mix = STRATEGIES[strategy]
    settings = CampaignSettings(
        name=f"replay-{strategy}-{seed}",
        budget=budget,
        batch_size=batch_size,
        mix=mix,
        baseline=baseline,
        seed=seed,
        pipeline=False,
    )
    campaign = Campaign(
        [problem],
        settings=settings,
        executor=ReplayExecutor(table),
        storage=SqliteStorage(":memory:"),
        proposers=make_proposers(mix, policy=policy, known=known),
        space_for=lambda p: space_of(table, p),
        policy=policy,
        learner=InMemoryLearner(policy) if policy is not None and online else None,
    )
    (result,) = campaign.run()
    return result.best_so_far(baseline)


def replay_benchmark(
    table: ReplayTable,
    *,
    strategies: Sequence[str] = tuple(STRATEGIES),
    seeds: int = 5,
    budget: int = 32,
    batch_size: int = 4,
    pretrain_steps: int = 200,
    baseline: str = "cublaslt_autotune",
    shapes: Sequence[str] | None = None,
    variants: Sequence[str] = ("online",),
    target: float = TARGET,
    start_policy: Policy | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> dict[str, Any]:
    """``variants`` (VARIANTS): with more than one, each run's strategy is labelled
    ``<strategy>/<variant>``, and the summary pairs every variant with the first.
    ``start_policy``: every rl run starts from a copy of it (e.g. the shipped policy, trained on
    other tables) instead of one pretrained on the table's other shapes."""
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise ValueError(f"unknown variants {unknown}: expected some of {VARIANTS}")
    labels = [s if len(variants) == 1 else f"{s}/{v}" for s in strategies for v in variants]
    problems = table.problems()
    held_shapes = list(dict.fromkeys(p.shape for p in problems))
    if shapes:
        held_shapes = [s for s in held_shapes if s in shapes]
    runs: list[dict[str, Any]] = []
    for shape in held_shapes:
        held = [p for p in problems if p.shape == shape]
        train = [p for p in problems if p.shape != shape]
        policy = None
        if start_policy is not None:
            policy = start_policy
        elif any(uses_policy(s) for s in strategies):
            policy = pretrained_policy(table, train, baseline=baseline, steps=pretrain_steps)
        known = table_records(table, train, baseline=baseline)
        for problem in held:
            speedups = table.speedups(problem, baseline)
            optimum = max(speedups.values())
            for seed in range(seeds):
                for strategy, variant in [(s, v) for s in strategies for v in variants]:
                    fresh = policy.clone() if policy is not None and uses_policy(strategy) else None
                    curve = run_strategy(
                        table,
                        problem,
                        strategy,
                        seed=campaign_seed(problem, seed),
                        budget=budget,
                        batch_size=budget if variant == "one-shot" else batch_size,
                        baseline=baseline,
                        policy=fresh,
                        known=known,
                        online=variant == "online",
                    )
                    normalised = [x / optimum for x in curve]
                    normalised += [normalised[-1]] * (budget - len(normalised))
                    reached = next(
                        (i + 1 for i, x in enumerate(normalised) if x >= target - 1e-12), None
                    )
                    runs.append(
                        {
                            "problem": problem.key,
                            "configs": len(speedups),
                            "strategy": strategy if len(variants) == 1 else f"{strategy}/{variant}",
                            "seed": seed,
                            "optimum": optimum,
                            "to_target": reached,
                            "curve": normalised,
                        }
                    )
            progress(f"{problem.key}: {len(speedups)} configs, optimum {optimum:.3f}x {baseline}")
    return {
        "settings": {
            "tables": table.sources,
            "strategies": list(strategies),
            "variants": list(variants),
            "seeds": seeds,
            "budget": budget,
            "batch_size": batch_size,
            "pretrain_steps": pretrain_steps if start_policy is None else None,
            "start_policy": list(start_policy.trained_on) if start_policy is not None else None,
            "baseline": baseline,
            "target": target,
            "held_out": "leave-one-shape-out (both layouts of a shape)",
            "transfer_knows": "every recorded config of the other shapes",
            "campaign_seed": "crc32 of '<problem key>/<seed>'",
        },
        "summary": summarize(runs, labels, budget),
        "paired": paired_variants(runs, strategies, variants) if len(variants) > 1 else {},
        "runs": runs,
    }


def paired_variants(
    runs: Sequence[dict[str, Any]], strategies: Sequence[str], variants: Sequence[str]
) -> dict[str, Any]:
    """Per strategy, each variant against the first, run by run (same problem and seed):
    candidates to the target (never: budget + 1) and the best found at the end of the budget;
    wins are runs where the first variant needed fewer candidates."""
    out: dict[str, Any] = {}
    for strategy in strategies:
        by_label: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
        for run in runs:
            by_label.setdefault(run["strategy"], {})[(run["problem"], run["seed"])] = run
        first = by_label.get(f"{strategy}/{variants[0]}", {})
        for other in variants[1:]:
            theirs = by_label.get(f"{strategy}/{other}", {})
            keys = sorted(first.keys() & theirs.keys())
            if not keys:
                continue
            budget = len(first[keys[0]]["curve"])
            steps = [
                (first[k]["to_target"] or budget + 1, theirs[k]["to_target"] or budget + 1)
                for k in keys
            ]
            diffs = [b - a for a, b in steps]
            end = [first[k]["curve"][-1] - theirs[k]["curve"][-1] for k in keys]
            out[f"{strategy}: {variants[0]} vs {other}"] = {
                "runs": len(keys),
                "wins": sum(d > 0 for d in diffs),
                "ties": sum(d == 0 for d in diffs),
                "losses": sum(d < 0 for d in diffs),
                "mean_saved_candidates": statistics.fmean(diffs),
                "mean_saved_interval": bootstrap_interval(diffs),
                "mean_end_gain": statistics.fmean(end),
            }
    return out


def bootstrap_interval(values: Sequence[float], *, draws: int = 2000, seed: int = 0) -> list[float]:
    """A 95 % percentile-bootstrap interval of the mean of ``values``."""
    import random

    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(draws))
    return [means[int(0.025 * draws)], means[int(0.975 * draws) - 1]]


def summarize(
    runs: Sequence[dict[str, Any]], strategies: Sequence[str], budget: int
) -> dict[str, Any]:
    """Per group of table size (and all together), per strategy: candidates to the target
    (median, mean and a 95 % bootstrap interval of the mean; a run that never gets there counts
    as budget + 1) and mean curves."""
    groups: dict[str, list[dict[str, Any]]] = {"all": list(runs)}
    for run in runs:
        groups.setdefault(f"{run['configs']} configs", []).append(run)
    out: dict[str, Any] = {}
    for group, members in groups.items():
        out[group] = {}
        for strategy in strategies:
            mine = [r for r in members if r["strategy"] == strategy]
            if not mine:
                continue
            steps = [r["to_target"] or budget + 1 for r in mine]
            curve = [statistics.fmean(r["curve"][i] for r in mine) for i in range(budget)]
            out[group][strategy] = {
                "runs": len(mine),
                "problems": len({r["problem"] for r in mine}),
                "median_to_target": statistics.median(steps),
                "mean_to_target": statistics.fmean(steps),
                "mean_to_target_interval": bootstrap_interval(steps),
                "reached": sum(r["to_target"] is not None for r in mine) / len(mine),
                "mean_curve": curve,
                "at": {str(c): curve[c - 1] for c in CHECKPOINTS if c <= budget},
            }
        random_median = out[group].get("random", {}).get("median_to_target")
        for stats in out[group].values():
            if random_median:
                stats["random_over_this"] = random_median / stats["median_to_target"]
    return out


def interval(stats: dict[str, Any]) -> str:
    low_high = stats.get("mean_to_target_interval")
    return f"{low_high[0]:.2f}…{low_high[1]:.2f}" if low_high else "-"


def format_table(report: dict[str, Any]) -> str:
    budget = report["settings"]["budget"]
    checkpoints = [c for c in CHECKPOINTS if c <= budget]
    lines = []
    share = f"{report['settings'].get('target', TARGET):.0%}"
    header = (
        f"{'group':12} {'strategy':18} {'runs':>5} {'med→' + share:>8} {'mean→' + share:>9} "
        f"{'95% CI':>13} {'reached':>8} "
        f"{'rand/x':>7} " + " ".join(f"{'@' + str(c):>6}" for c in checkpoints)
    )
    lines.append(header)
    lines.append("-" * len(header))
    for group, strategies in report["summary"].items():
        for strategy, s in strategies.items():
            ratio = s.get("random_over_this")
            lines.append(
                f"{group:12} {strategy:18} {s['runs']:5d} {s['median_to_target']:8.1f} "
                f"{s['mean_to_target']:9.2f} {interval(s):>13} {s['reached']:8.0%} "
                f"{(f'{ratio:.2f}x' if ratio else '-'):>7} "
                + " ".join(f"{s['at'][str(c)]:6.3f}" for c in checkpoints)
            )
    target = report["settings"].get("target", TARGET)
    for name, p in report.get("paired", {}).items():
        low, high = p["mean_saved_interval"]
        lines.append(
            f"{name}: {p['wins']} wins, {p['ties']} ties, {p['losses']} losses over "
            f"{p['runs']} runs; candidates saved to {target:.0%}: "
            f"mean {p['mean_saved_candidates']:+.2f} "
            f"(95 % CI {low:+.2f} … {high:+.2f}); best at the end {p['mean_end_gain']:+.4f}"
        )
    lines.append(
        f"med/mean→{target:.0%}: candidates until the best found is ≥ {target:.0%} of the "
        "table's optimum "
        f"(never: counted as {budget + 1}); @k: mean best/optimum after k candidates"
    )
    return "\n".join(lines)


def share_reached(runs: Sequence[dict[str, Any]], strategy: str, budget: int) -> list[float]:
    """After each candidate, the share of ``strategy``'s runs that have reached the target."""
    steps = [r["to_target"] for r in runs if r["strategy"] == strategy]
    if not steps:
        return [0.0] * budget
    return [sum(s is not None and s <= k for s in steps) / len(steps) for k in range(1, budget + 1)]


def write_plot(report: dict[str, Any], path: Path) -> bool:
    """A PNG of mean best-so-far vs candidates per strategy and group of table size, and the
    share of runs at the target (its 50 % crossing is the median); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = report["summary"]
    budget = report["settings"]["budget"]
    panels = len(groups) + 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    for ax, (group, strategies) in zip(axes[0], groups.items(), strict=False):
        for strategy, s in strategies.items():
            ax.plot(range(1, len(s["mean_curve"]) + 1), s["mean_curve"], label=strategy)
        ax.axhline(TARGET, color="grey", linestyle=":")
        runs = max(s["runs"] for s in strategies.values())
        ax.set_title(f"{group}: mean best so far ({runs} runs each)")
        ax.set_xlabel("candidates tried")
        ax.set_ylabel("best found / table optimum")
        ax.legend()
    ax = axes[0][-1]
    for strategy in groups["all"]:
        shares = share_reached(report["runs"], strategy, budget)
        ax.plot(range(1, budget + 1), shares, label=strategy)
    ax.axhline(0.5, color="grey", linestyle=":")
    ax.set_title(f"all: share of runs at ≥ {TARGET:.0%} of the optimum")
    ax.set_xlabel("candidates tried")
    ax.set_ylabel("share of runs")
    ax.set_ylim(0, 1)
    ax.legend()
    tables = ", ".join(Path(t).name for t in report["settings"]["tables"])
    fig.suptitle(f"replay, leave-one-shape-out, on {tables}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(report: dict[str, Any], path: Path) -> None:
    """Settings and summary indented; one line per run (the curves make the bulk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1)
    runs = ",\n".join("  " + json.dumps(run) for run in report.get("runs", []))
    path.write_text(f'{head[:-2]},\n "runs": [\n{runs}\n ]\n}}\n')
