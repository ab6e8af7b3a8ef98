"""Issue 41's acceptance on shapes never measured: draw them, then read a campaign's finals.

    python3 bench/holdout.py draw --seed 4141 [--per-class 6]
        prints 24 MxNxK of the CUDA-L2 grid ({64, …, 16384}³, NN), 6 a class, none that a file
        under bench/results (or the recorded cuBLASLt kernels) names: for `engine optimize
        --shapes … --layout nn --budget 32` with the default proposers and finals
    python3 bench/holdout.py summary RESULTS.json [--out FILE]
        per class and overall, the geomean of the finals' kernel against cuBLASLt-autotune and
        Inductor max-autotune (device protocol, each problem's one kernel, the times from one
        child process), each acceptance line met or not, and per shape whether the kernel is
        faster, tied or slower (a ratio whose interquartile interval holds 1.0 is a tie)
    python3 bench/holdout.py summary RESULTS.json --saved-finals DB
        the same for a campaign cut during its finals (RESULTS.json then holds only the search):
        each shape's final as DB's finals file (beside it, engine.execution.final.SavedFinals)
        kept it; a shape not yet re-measured is a miss

The classes are the issue's: long-K (M·N ≤ 2^20 and K ≥ 4·max(M, N)); small (M·N·K ≤ 2^30);
large (M·N·K ≥ 2^36); mid, the rest. A problem the campaign left without a final counts as a miss
(the summary names it) and is left out of the geomeans. Claims nothing: the JSON holds the ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.timing.ratios import Ratio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLASSES = ("long-K", "small", "mid", "large")
GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
LT, INDUCTOR = "cublaslt_autotune", "inductor_max_autotune"
PROTOCOL = "device"
# (what, class or "all", baseline, the geomean it must reach): issue 41's acceptance
TARGETS = (
    ("overall vs cuBLASLt-autotune", "all", LT, 1.03),
    ("overall vs Inductor max-autotune", "all", INDUCTOR, 1.00),
    ("long-K vs cuBLASLt-autotune", "long-K", LT, 1.20),
    ("small vs cuBLASLt-autotune", "small", LT, 1.04),
    *((f"{c} vs cuBLASLt-autotune at least", c, LT, 0.99) for c in CLASSES),
)

Shape = tuple[int, int, int]


def shape_class(m: int, n: int, k: int) -> str:
    if m * n <= 2**20 and k >= 4 * max(m, n):
        return "long-K"
    mnk = m * n * k
    if mnk <= 2**30:
        return "small"
    return "large" if mnk >= 2**36 else "mid"


def draw(seed: int, per_class: int, known: set[Shape]) -> list[Shape]:
    """``per_class`` shapes of each class, drawn with ``seed`` from the grid less ``known``,
    class after class in CLASSES order."""
    pool = [(m, n, k) for m in GRID for n in GRID for k in GRID if (m, n, k) not in known]
    rng = random.Random(seed)
    drawn: list[Shape] = []
    for name in CLASSES:
        members = [s for s in pool if shape_class(*s) == name]
        if len(members) < per_class:
            raise SystemExit(f"only {len(members)} unmeasured {name} shapes, {per_class} asked")
        drawn += rng.sample(members, per_class)
    return drawn


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def ratios(entry: Mapping[str, Any]) -> dict[str, float]:
    """The problem's finals kernel against each baseline in the device protocol ({} without)."""
    if entry.get("best") is None:
        return {}
    return dict(entry.get("final_speedups", {}).get(PROTOCOL, {}))


def judged(final: Mapping[str, Any], kernel: str, baseline: str) -> Ratio | None:
    """The kernel against ``baseline``'s better layout in the finals' device protocol, value and
    faster/tied/slower verdict from one session (engine.timing.ratios: the two interquartile
    intervals); None where the finals kept no time for either."""
    from engine.publish.bundle import final_sessions  # imports torch: at call time

    session = final_sessions(final, PROTOCOL).get(kernel)
    return session.ratios().get(baseline) if session is not None else None


def void_times(final: Mapping[str, Any]) -> list[str]:
    """The baselines whose times in ``final`` (a shape's final summary) are void: Inductor's
    taken before revision 2 of the device protocol counted its host work (NOTES §41). A summary
    that records no revision was measured before revisions were recorded."""
    if not final or final.get("protocol_revision", 1) >= 2:
        return []
    return [INDUCTOR]


def problem_class(key: str) -> str:
    """The class of a problem key such as ``256x64x2048_nn``."""
    m, n, k = (int(x) for x in key.rsplit("_", 1)[0].split("x"))
    return shape_class(m, n, k)


def summary(report: Mapping[str, Any]) -> dict[str, Any]:
    rows, misses = [], []
    finals = report.get("final", {})
    for entry in report.get("problems", []):
        found = ratios(entry)
        if not found:
            misses.append({"problem": entry["problem"], "why": entry.get("final_error", "")})
            continue
        final = finals.get(entry["problem"], {})
        void = void_times(final)
        sessions = {b: judged(final, entry["best"], b) for b in (LT, INDUCTOR)}
        rows.append(
            {
                "problem": entry["problem"],
                "class": problem_class(entry["problem"]),
                "kernel": entry["best"],
                # the judged session's own ratio where the finals kept it: what is shown is
                # what is judged
                **{
                    b: None
                    if b in void
                    else found.get(b)
                    if sessions[b] is None
                    else sessions[b].value
                    for b in (LT, INDUCTOR)
                },
                "verdicts": {
                    b: None if r is None or b in void else r.verdict for b, r in sessions.items()
                },
                "void": void,
            }
        )
    classes: dict[str, dict[str, Any]] = {}
    for name in (*CLASSES, "all"):
        members = [r for r in rows if name in ("all", r["class"])]
        classes[name] = {
            "problems": len(members),
            **{b: geomean(r[b] for r in members if r[b] is not None) for b in (LT, INDUCTOR)},
            f"{LT}_verdicts": dict(
                Counter(r["verdicts"][LT] for r in members if r["verdicts"][LT] is not None)
            ),
        }
    missed = Counter(problem_class(m["problem"]) for m in misses)
    missed["all"] = len(misses)

    def voided(group: str, baseline: str) -> int:
        return sum(baseline in r["void"] for r in rows if group in ("all", r["class"]))

    checks = [
        {
            "what": what,
            "geomean": classes[group][baseline],
            "target": target,
            # a group with a shape left without a final, or whose time is void, has not met
            # anything yet
            "without_final": missed[group],
            "void": voided(group, baseline),
            "met": not missed[group]
            and not voided(group, baseline)
            and classes[group][baseline] is not None
            and classes[group][baseline] >= target,
        }
        for what, group, baseline, target in TARGETS
    ]
    return {"rows": rows, "misses": misses, "classes": classes, "checks": checks}


def with_saved_finals(report: dict[str, Any], db: Path) -> dict[str, Any]:
    """``report`` (a campaign's results JSON written before its finals) with the finals that
    the campaign in ``db`` saved so far, each shape's best chosen as a finished campaign's
    report chooses it (engine.commands.optimize_command.with_final_choices)."""
    from engine.campaign.loop import ProblemResult
    from engine.campaign.storage import SqliteStorage
    from engine.commands.optimize_command import with_final_choices
    from engine.execution.final import SavedFinals

    saved = SavedFinals(db.with_suffix(".finals.json")).data["finals"]
    storage = SqliteStorage(db)
    try:
        results = [
            ProblemResult(p, storage.candidates(name, p.key), stopped="budget")
            for name in storage.campaign_names()
            for p in storage.problems(name)
        ]
    finally:
        storage.close()
    out = json.loads(json.dumps(report))  # the caller's report stays as it was
    # a summary saved before it recorded its revision has the one its settings say
    out["final"] = {
        key: {"protocol_revision": entry["settings"].get("protocol_revision", 1)} | entry["summary"]
        for key, entry in saved.items()
    }
    with_final_choices(out, results, report["settings"]["baseline"])
    return out


def table(result: Mapping[str, Any]) -> str:
    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    def judged(row: Mapping[str, Any], baseline: str) -> str:
        if baseline in row.get("void", ()):
            return "void"
        said = row["verdicts"].get(baseline)
        return cell(row[baseline]) + (f" {said}" if said else "")

    lines = [f"{'shape':<16} {'class':<7} {'vs Lt-autotune':<21} {'vs Inductor':<21} kernel"]
    for row in result["rows"]:
        lines.append(
            f"{row['problem']:<16} {row['class']:<7} {judged(row, LT):<21} "
            f"{judged(row, INDUCTOR):<21} {row['kernel']}"
        )
    lines.append(
        f"{'class':<8} {'shapes':>6} {'vs Lt-autotune':>15} {'vs Inductor':>12}  "
        "faster/tied/slower vs Lt-autotune"
    )
    for name, c in result["classes"].items():
        counts = c[f"{LT}_verdicts"]
        split = "/".join(str(counts.get(v, 0)) for v in ("faster", "tied", "slower"))
        lines.append(
            f"{name:<8} {c['problems']:>6} {cell(c[LT]):>15} {cell(c[INDUCTOR]):>12}  {split}"
        )
    lines += [
        f"{'met' if c['met'] else 'NOT met':<7} {c['what']}: {cell(c['geomean'])} "
        f"(≥ {c['target']:.2f})"
        + (f", {c['without_final']} shapes without a final" if c.get("without_final") else "")
        + (f", {c['void']} shapes' times void (protocol revision 1)" if c.get("void") else "")
        for c in result["checks"]
    ]
    lines += [f"no final: {m['problem']} {m['why']}".rstrip() for m in result["misses"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/holdout.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    drawing = commands.add_parser("draw")
    drawing.add_argument("--seed", type=int, required=True)
    drawing.add_argument("--per-class", type=int, default=6)
    reading = commands.add_parser("summary")
    reading.add_argument("results", type=Path, help="engine optimize's results JSON")
    reading.add_argument("--out", type=Path)
    reading.add_argument(
        "--saved-finals",
        type=Path,
        metavar="DB",
        help="the campaign's database: its finals saved so far, for a campaign cut during them",
    )
    args = parser.parse_args(argv)
    if args.command == "draw":
        from bench.replay_fresh import known_shapes

        shapes = draw(args.seed, args.per_class, known_shapes())
        print(",".join(f"{m}x{n}x{k}" for m, n, k in shapes))
        return 0
    if not args.results.is_file():
        parser.error(f"{args.results}: no such results file (engine optimize --out writes it)")
    report = json.loads(args.results.read_text())
    if args.saved_finals:
        if not args.saved_finals.is_file():
            parser.error(f"{args.saved_finals}: no such campaign database")
        report = with_saved_finals(report, args.saved_finals)
    result = summary(report)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
