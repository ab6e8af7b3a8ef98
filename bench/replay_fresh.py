"""A fresh replay table, recorded after the search method was frozen (bench/NOTES.md §29).

    python bench/replay_fresh.py draw --seed 4304 --out bench/results/DATE-fresh-replay/shapes.json
    bash bench/device/gpu_run.sh replay-fresh      # on the GPU: ``record`` into $OUT
    python bench/replay_fresh.py replay --shapes .../shapes.json --table .../fresh-table.json \\
        --out .../replay.json                       # on the CPU

``draw`` (CPU): 16 shapes of CUDA-L2's grid ({64, …, 16384}³), 4 per class, each class's pool
sorted and sampled with ``random.Random(seed)`` in the order of SHAPE_CLASSES. The classes are the
project's: long-K (the shapes the longk family serves, engine.codegen.longk.serves: M·N ≤ 2^20
and K ≥ 4·max(M, N); a draw records its bounds, and re-draws with them), then by log2(MNK) as
engine.publish.report.size_class: small (< 30), medium, large (≥ 36). The pools hold no
(M, N, K) that a file under bench/results names (a shape written MxNxK or M×N×K in any JSON,
log, text or CSV file, compressed or not; a problem record's ``m``, ``n``, ``k``; a campaign
database's problems) nor a problem of the seed proposer's recorded cuBLASLt kernels: nothing the
shipped policy, the transfer proposer or the seed proposer learnt from. It writes the shapes, the
seed, the configs to time (below) and the frozen method: the git commit, the sha256 of the shipped
policy and recorded kernels and of each source file of the search (METHOD_SOURCES), and the replay's
settings (strategies, seeds, budget, batch, target, baseline).

``record`` (GPU, bench/device/gpu_run.sh replay-fresh): builds (or finds in the kernel cache) the
configs shapes.json names, verifies each once on the first drawn shape it is valid for, then times
the verified configs valid for each shape beside every baseline in the device protocol
(bench/family_sweep.sweep_row: the same timing as every earlier sweep table), shape by shape,
cheapest first. The table (bench/family_sweep.py's sweep format, which
engine.execution.executor.ReplayTable reads, plus ``fresh``: the shapes file's digest and the
subset) is rewritten whole after each shape, so a crash or the --deadline loses at most the shape
in progress; ``not_timed`` lists what the deadline left, and a run with --resume goes on from it.

The configs: the NN library of every family (sm90 182, sm80 96, triton 86, longk 78 in
engine.codegen.library) is too much for one device call of 600 s: the device protocol runs every
candidate at least 20 times a shape, so a large shape costs about 20 × (configs) × 1.8 × (the best
kernel's time) (H200 library sweep, 2026-12-03: the mean config took 1.6–2.4× the best), and
verification about 0.7 s a config (192 in 133 s on 12 jobs). ``draw`` keeps SUBSET[family] configs
of each family's library, spread evenly over its order (engine.codegen.library.library's
``limit``: tiles, clusters, schedules and splits all stay represented), and prints the device time
this estimate gives for the drawn shapes (``estimate`` in shapes.json). Every config of the table
is named in its ``configs``; ``fresh.subset`` says how many of each family's library it kept.

``replay`` (CPU): the replay benchmark (engine.campaign.replay_benchmark) on the table for the
frozen strategies, every held-out shape (leave-one-shape-out: the transfer proposer knows the
other fresh shapes), each seed; the rl strategies start from the frozen shipped policy (as
``engine optimize`` does; ``--pretrain-on-table`` pretrains on the other fresh shapes instead).
It refuses to run when a source of METHOD_SOURCES or the policy changed since the draw, unless
--allow-changed-method (the report then lists what changed). It prints candidates to 95 % of each
shape's optimum per strategy (mean over seeds, a 95 % bootstrap interval) and the summary, and
writes both to --out.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import lzma
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine.campaign.storage import SqliteStorage  # noqa: E402
from engine.codegen.library import library  # noqa: E402
from engine.codegen.longk import MAX_MN_LOG2, MIN_K_OVER_MN, serves  # noqa: E402
from engine.problem import Layout, Problem  # noqa: E402
from engine.publish.report import size_class  # noqa: E402

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
SHAPE_CLASSES = ("long-K", "small", "medium", "large")
PER_CLASS = 4
LAYOUT = Layout.NN
FAMILIES = ("sm90", "sm80", "triton", "longk")
# configs of each family's NN library to time (module docstring: one device call)
SUBSET = {"sm90": 80, "sm80": 40, "triton": 86, "longk": 78}
RESULTS = ROOT / "bench" / "results"
RECORDED_KERNELS = ROOT / "engine" / "propose" / "pretrained" / "cublaslt_kernels.json"
POLICY = ROOT / "engine" / "propose" / "pretrained" / "sm_90.pt"
# what decides which candidates a strategy proposes in the replay
METHOD_SOURCES = (
    "engine/propose",
    "engine/codegen/library.py",  # the curated configs and the seed's longk prior
    "engine/campaign/replay_benchmark.py",
    "engine/campaign/round.py",
    "engine/campaign/loop.py",
    "engine/execution/executor.py",
)
REPLAY = {
    "strategies": ["rl", "rl+transfer", "seed", "evolve", "random", "default"],
    "seeds": 10,
    "budget": 32,
    "batch": 8,  # engine optimize's for a budget of 32 (engine.campaign.round.batch_size_for)
    "target": 0.95,
    "baseline": "cublaslt_autotune",
    "policy": "engine/propose/pretrained/sm_90.pt",
}
TEXT_SUFFIXES = (".json", ".jsonl", ".log", ".txt", ".md", ".csv", ".xml", ".sh")
SHAPE_TEXT = re.compile(r"(?<![\w.])(\d{2,5})[x×](\d{2,5})[x×](\d{2,5})(?![\d.])")
PROBLEM_FIELDS = re.compile(r'"m":\s*(\d+),\s*"n":\s*(\d+),\s*"k":\s*(\d+)')
# the device-time model of the module docstring (H200 library sweep, 2026-12-03)
VERIFY_SECONDS_PER_CONFIG = 0.7
SHAPE_FIXED_SECONDS = 5.0  # baselines' autotune, heat-up, the protocol's 3 s floor
MIN_REPS = 20
MEAN_OVER_BEST = 1.8
TIMED_OVERHEAD = 2.2  # flushes, timed checks: measured over the sum of kernel times
PEAK_FLOPS = 700e12  # the best library kernels on large shapes (H200)
LAUNCH_FLOOR = 6e-6

Shape = tuple[int, int, int]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- draw ----------------------------------------------------------------------------------------


# (log2 of the largest M·N, the least K / max(M, N)): the long-K class, as engine.codegen.longk
# serves it now; a committed draw says which it was drawn with (long_k_bounds)
LONG_K_BOUNDS = (MAX_MN_LOG2, MIN_K_OVER_MN)


def shape_class(shape: Shape, long_k: tuple[int, int] = LONG_K_BOUNDS) -> str:
    m, n, k = shape
    if serves(Problem(m, n, k, LAYOUT), *long_k):
        return "long-K"
    return size_class(m, n, k)


def long_k_bounds(doc: dict) -> tuple[int, int]:
    """The long-K bounds a shapes file was drawn with (its class text, for files from before
    the bounds were recorded as numbers)."""
    if bounds := doc["distribution"].get("long_k_bounds"):
        return (bounds[0], bounds[1])
    found = re.search(r"2\^(\d+) and K ≥ (\d+)", doc["distribution"]["classes"]["long-K"])
    if found is None:
        raise ValueError("the shapes file names no long-K bounds")
    return (int(found.group(1)), int(found.group(2)))


def _text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".xz":
        data = lzma.decompress(data)
    return data.decode(errors="replace")


def shapes_in_text(text: str) -> set[Shape]:
    """Every MxNxK (or M×N×K) not inside a name (``hgemm_sm90_128x128x64``: a tile), and every
    problem record's m, n, k."""
    found = {tuple(int(x) for x in g) for g in SHAPE_TEXT.findall(text)}
    found |= {tuple(int(x) for x in g) for g in PROBLEM_FIELDS.findall(text)}
    return found  # type: ignore[return-value]


def is_text_result(path: Path) -> bool:
    name = path.name[: -len(".xz")] if path.name.endswith(".xz") else path.name
    return path.is_file() and name.endswith(TEXT_SUFFIXES)


def known_shapes(
    results: Path = RESULTS, extra: Iterable[Path] = (RECORDED_KERNELS,)
) -> set[Shape]:
    """Every (M, N, K) a file under ``results`` or an ``extra`` file names (module docstring)."""
    seen: set[Shape] = set()
    files = [p for p in sorted(results.rglob("*")) if is_text_result(p)] + list(extra)
    for path in files:
        try:
            seen |= shapes_in_text(_text(path))
        except (OSError, lzma.LZMAError):
            continue
    for path in sorted(results.rglob("*.sqlite")):
        storage = SqliteStorage(path)
        try:
            for name in storage.campaign_names():
                seen |= {(p.m, p.n, p.k) for p in storage.problems(name)}
        finally:
            storage.close()
    return seen


def class_pools(
    excluded: set[Shape], long_k: tuple[int, int] = LONG_K_BOUNDS
) -> dict[str, list[Shape]]:
    pools: dict[str, list[Shape]] = {c: [] for c in SHAPE_CLASSES}
    for shape in itertools.product(GRID, repeat=3):
        if shape not in excluded:
            pools[shape_class(shape, long_k)].append(shape)
    return {c: sorted(shapes) for c, shapes in pools.items()}


def draw_shapes(
    excluded: set[Shape],
    *,
    seed: int,
    per_class: int = PER_CLASS,
    long_k: tuple[int, int] = LONG_K_BOUNDS,
) -> list[Shape]:
    """``per_class`` shapes of each class's pool, the classes in SHAPE_CLASSES's order, one
    ``random.Random(seed)`` for all (the same seed, exclusions and bounds always draw the same)."""
    rng = random.Random(seed)
    pools = class_pools(excluded, long_k)
    return [s for c in SHAPE_CLASSES for s in rng.sample(pools[c], per_class)]


def shape_key(shape: Shape) -> str:
    return "x".join(str(x) for x in shape)


def parse_shape(text: str) -> Shape:
    m, n, k = (int(x) for x in text.split("x"))
    return (m, n, k)


def subset_configs(limits: Mapping[str, int] = SUBSET) -> dict[str, list[str]]:
    """Per family, the names of ``limits[family]`` NN library configs spread over its order."""
    return {f: [c.name for c in library(f, LAYOUT, limits[f])] for f in FAMILIES if f in limits}


def valid_configs(shape: Shape, names: Mapping[str, Sequence[str]]) -> list[Any]:
    problem = Problem(*shape, LAYOUT)
    return [c for c in resolve(names) if c.is_valid(problem)]


def resolve(names: Mapping[str, Sequence[str]]) -> list[Any]:
    """The library configs ``names`` names, per family (KeyError for a name the library no
    longer holds: the table would not be the one the draw froze)."""
    out = []
    for family, wanted in names.items():
        by_name = {c.name: c for c in library(family, LAYOUT)}
        out += [by_name[name] for name in wanted]
    return out


def best_seconds(shape: Shape) -> float:
    m, n, k = shape
    return max(2 * m * n * k / PEAK_FLOPS, LAUNCH_FLOOR)


def shape_seconds(shape: Shape, configs: int) -> float:
    """The device-time model's seconds to time ``configs`` configs and the baselines on one
    shape."""
    kernels = MIN_REPS * (configs + 8) * MEAN_OVER_BEST * best_seconds(shape)
    return SHAPE_FIXED_SECONDS + TIMED_OVERHEAD * kernels


def estimate(shapes: Sequence[Shape], names: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    configs = sum(len(v) for v in names.values())
    per_shape = {
        shape_key(s): round(shape_seconds(s, len(valid_configs(s, names))), 1) for s in shapes
    }
    verify = VERIFY_SECONDS_PER_CONFIG * configs
    return {
        "model": "verify 0.7 s a config; a shape 5 s + 2.2 × 20 reps × (configs + 8 baselines) × "
        "1.8 × max(2MNK / 700 TFLOP/s, 6 µs) (H200 library sweep of 2026-12-03)",
        "verify_s": round(verify, 1),
        "per_shape_s": per_shape,
        "total_s": round(verify + sum(per_shape.values()), 1),
    }


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def method_files(root: Path = ROOT) -> list[Path]:
    out: list[Path] = []
    for entry in METHOD_SOURCES:
        path = root / entry
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def method_digests(root: Path = ROOT) -> dict[str, str]:
    """sha256 of each source of the search and of the shipped policy and recorded kernels."""
    files = [*method_files(root), POLICY, RECORDED_KERNELS]
    return {str(p.relative_to(root)): sha256_file(p) for p in files if p.is_file()}


def git_commit(root: Path = ROOT) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def draw_document(
    *, seed: int, results: Path = RESULTS, extra: Iterable[Path] = (RECORDED_KERNELS,)
) -> dict[str, Any]:
    excluded = known_shapes(results, extra)
    pools = class_pools(excluded)
    shapes = draw_shapes(excluded, seed=seed)
    names = subset_configs()
    return {
        "what": "a fresh replay table's shapes, configs and the search method frozen before it "
        "was recorded (bench/replay_fresh.py)",
        "seed": seed,
        "drawn_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "layout": LAYOUT.value,
        "distribution": {
            "grid": list(GRID),
            "long_k_bounds": list(LONG_K_BOUNDS),
            "classes": {
                "long-K": f"M·N ≤ 2^{MAX_MN_LOG2} and K ≥ {MIN_K_OVER_MN}·max(M, N) "
                "(engine.codegen.longk.serves)",
                "small": "log2(MNK) < 30, not long-K",
                "medium": "30 ≤ log2(MNK) < 36, not long-K",
                "large": "log2(MNK) ≥ 36, not long-K",
            },
            "per_class": PER_CLASS,
            "pool_sizes": {c: len(p) for c, p in pools.items()},
            "excluded": f"{len(excluded)} (M, N, K) named under bench/results and in "
            "engine/propose/pretrained/cublaslt_kernels.json (excluded_shapes)",
        },
        "excluded_shapes": [shape_key(s) for s in sorted(excluded)],
        "shapes": [{"shape": shape_key(s), "class": shape_class(s)} for s in shapes],
        "configs": {
            "rule": "engine.codegen.library.library(family, nn, limit): limit configs spread "
            "evenly over the family's library",
            "subset": {
                f: {"kept": SUBSET[f], "library": len(library(f, LAYOUT))} for f in FAMILIES
            },
            "names": names,
        },
        "estimate": estimate(shapes, names),
        "method": {
            "commit": git_commit(),
            "sha256": method_digests(),
            "replay": REPLAY,
        },
    }


# -- record --------------------------------------------------------------------------------------


def document_digest(path: Path) -> str:
    return sha256_file(path)


def write_whole(path: Path, report: Mapping[str, Any]) -> None:
    """The report written to a temporary file and renamed over ``path``: a crash leaves the last
    whole report."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=1, default=str))
    os.replace(partial, path)


def record_plan(shapes_doc: Mapping[str, Any]) -> list[tuple[Problem, list[Any]]]:
    """(problem, its valid configs of the subset), cheapest shape first by the device-time
    model."""
    names = shapes_doc["configs"]["names"]
    configs = resolve(names)
    plan = []
    for entry in shapes_doc["shapes"]:
        problem = Problem.parse(entry["shape"], shapes_doc.get("layout", LAYOUT.value))
        plan.append((problem, [c for c in configs if c.is_valid(problem)]))
    return sorted(plan, key=lambda item: shape_seconds(problem_shape(item[0]), len(item[1])))


# a config is verified once, on a shape of the first class it is valid for in this order (mid-size
# shapes run every K-loop stage and verify fast); the timed checks then check it on every shape
VERIFY_CLASS_ORDER = ("medium", "long-K", "small", "large")


def verify_problem(plan: Sequence[tuple[Problem, list[Any]]]) -> Callable[[int, Any], Problem]:
    """The problem a config is verified on: by VERIFY_CLASS_ORDER, then the plan's order."""
    ordered = sorted(
        plan, key=lambda item: VERIFY_CLASS_ORDER.index(shape_class(problem_shape(item[0])))
    )
    valid = {problem.key: {c.name for c in configs} for problem, configs in plan}

    def choose(_index: int, config: Any) -> Problem:
        for problem, _configs in ordered:
            if config.name in valid[problem.key]:
                return problem
        raise ValueError(f"{config.name} is valid for none of the drawn shapes")

    return choose


def problem_shape(problem: Problem) -> Shape:
    return (problem.m, problem.n, problem.k)


Builder = Callable[[list[Any]], dict[str, tuple[dict[str, Any], Path | None]]]
Timer = Callable[[Problem, dict[str, Path]], dict[str, Any]]


def record_table(
    shapes_doc: Mapping[str, Any],
    *,
    shapes_digest: str,
    out: Path,
    build: Builder,
    time_shape: Timer,
    deadline: float | None = None,
    resume: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    exists: Callable[[Path], bool] = Path.is_file,
) -> dict[str, Any]:
    """The fresh table: ``build(configs)`` → name → (report entry, verified library or None),
    then ``time_shape(problem, candidates)`` → a sweep row per shape, the report rewritten after
    each; no shape is started after ``deadline`` seconds. ``resume``: an earlier report of the
    same shapes file, whose verdicts and timed shapes are kept (and its libraries, where they
    ``exists`` on this machine)."""
    started = clock()
    plan = record_plan(shapes_doc)
    report: dict[str, Any] = {
        "fresh": {
            "shapes_sha256": shapes_digest,
            "seed": shapes_doc["seed"],
            "subset": shapes_doc["configs"]["subset"],
            "rule": shapes_doc["configs"]["rule"],
        },
        "configs": {},
        "sweep": [],
    }
    if resume is not None:
        if resume.get("fresh", {}).get("shapes_sha256") != shapes_digest:
            raise ValueError("--resume: that table was recorded for another shapes file")
        report["configs"] = dict(resume["configs"])
        report["sweep"] = list(resume["sweep"])
    wanted = {c.name: c for _, configs in plan for c in configs}
    libraries = {
        name: Path(entry["library"])
        for name, entry in report["configs"].items()
        if entry.get("verify") == "ok" and entry.get("library") and exists(Path(entry["library"]))
    }
    # a failed verdict stands; a verified config whose library this machine lacks is built again
    failed = {n for n, e in report["configs"].items() if e.get("verify") != "ok"}
    todo = [c for name, c in wanted.items() if name not in libraries and name not in failed]
    built = build(todo) if todo else {}
    for name, (entry, path) in built.items():
        # the library's path in this machine's kernel cache, for a --resume on it
        report["configs"][name] = {**entry, "library": str(path) if path else None}
        if path is not None and entry.get("verify") == "ok":
            libraries[name] = path
    report["build_verify_s"] = clock() - started
    write_whole(out, report)
    timed = {row["problem"] for row in report["sweep"]}
    report["not_timed"] = []
    for problem, configs in plan:
        if problem.key in timed:
            continue
        if deadline is not None and clock() - started > deadline:
            log(f"deadline: {problem.key} not timed")
            report["not_timed"].append(problem.key)
            continue
        candidates = {c.name: libraries[c.name] for c in configs if c.name in libraries}
        if candidates:
            report["sweep"].append(time_shape(problem, candidates))
        write_whole(out, report)
    report["wall_s"] = clock() - started
    write_whole(out, report)
    return report


def gpu_builder(args: argparse.Namespace, plan: Sequence[tuple[Problem, list[Any]]]) -> Builder:
    """Builds and verifies through bench/family_sweep.build_and_verify (its --verdicts: an
    earlier table of this machine's, whose verified configs are not verified again)."""
    from family_sweep import build_and_verify

    from engine.config import load as load_config

    config = load_config()

    def build(configs: list[Any]) -> dict[str, tuple[dict[str, Any], Path | None]]:
        sweep_args = argparse.Namespace(verify_jobs=args.verify_jobs, verdicts=args.verdicts)
        built, entries, wall = build_and_verify(configs, sweep_args, config, verify_problem(plan))
        log(f"built and verified {len(configs)} configs ({wall:.0f} s compiling)")
        out = {}
        for cfg, result, entry in zip(configs, built, entries, strict=True):
            out[cfg.name] = (entry, result.library if result.ok else None)
        return out

    return build


def gpu_timer(device_seconds: float) -> Timer:
    from family_sweep import sweep_row

    from engine.config import load as load_config
    from engine.timing.measure import load_shim

    shim = load_shim(load_config())
    return lambda problem, candidates: sweep_row(problem, candidates, shim, device_seconds)


# -- replay --------------------------------------------------------------------------------------


def changed_method(
    shapes_doc: Mapping[str, Any], root: Path = ROOT, policy: Path | None = None
) -> list[str]:
    """The frozen method's files whose sha256 differs now (or that are gone or new);
    ``policy``: the file standing for the shipped policy (e.g. the frozen commit's, from
    ``git show COMMIT:engine/propose/pretrained/sm_90.pt``)."""
    frozen: dict[str, str] = shapes_doc["method"]["sha256"]
    now = method_digests(root)
    if policy is not None:
        now[str(POLICY.relative_to(ROOT))] = sha256_file(policy)
    return sorted(k for k in frozen.keys() | now.keys() if frozen.get(k) != now.get(k))


def per_shape(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per problem and strategy: candidates to the target over the seeds (never: budget + 1),
    their mean with a 95 % bootstrap interval, the median, and the share of seeds that got
    there."""
    from engine.campaign.replay_benchmark import bootstrap_interval

    budget = report["settings"]["budget"]
    out: dict[str, dict[str, Any]] = {}
    for run in report["runs"]:
        out.setdefault(run["problem"], {}).setdefault(run["strategy"], []).append(run)
    table: dict[str, dict[str, Any]] = {}
    for problem, strategies in out.items():
        table[problem] = {}
        for strategy, runs in strategies.items():
            steps = [r["to_target"] or budget + 1 for r in runs]
            table[problem][strategy] = {
                "configs": runs[0]["configs"],
                "to_target": steps,
                "mean": statistics.fmean(steps),
                "interval": bootstrap_interval(steps),
                "median": statistics.median(steps),
                "reached": sum(r["to_target"] is not None for r in runs) / len(runs),
            }
    return table


def format_per_shape(table: Mapping[str, Mapping[str, Any]], strategies: Sequence[str]) -> str:
    lines = [f"{'problem':22} {'configs':>7} " + " ".join(f"{s:>19}" for s in strategies)]
    for problem, stats in table.items():
        configs = next(iter(stats.values()))["configs"]
        cells = []
        for s in strategies:
            if s not in stats:
                cells.append(f"{'-':>19}")
                continue
            low, high = stats[s]["interval"]
            cells.append(f"{stats[s]['mean']:5.1f} ({low:4.1f}–{high:4.1f})".rjust(19))
        lines.append(f"{problem:22} {configs:7d} " + " ".join(cells))
    lines.append("mean candidates to the target over the seeds (95 % bootstrap interval)")
    return "\n".join(lines)


def replay_fresh(
    shapes_doc: Mapping[str, Any],
    table_paths: Sequence[Path],
    *,
    pretrain_on_table: bool = False,
    seeds: int | None = None,
    strategies: Sequence[str] | None = None,
    policy_path: Path | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> dict[str, Any]:
    """The frozen replay (module docstring) on the recorded table."""
    from engine.campaign.replay_benchmark import replay_benchmark
    from engine.execution.executor import ReplayTable
    from engine.propose.policy import Policy, policy_families

    settings = shapes_doc["method"]["replay"]
    table = ReplayTable.load(table_paths)
    start_policy = None
    if not pretrain_on_table:
        path = policy_path or ROOT / settings["policy"]
        start_policy = Policy.load(path, policy_families(table.arch))
        if start_policy is None:
            raise ValueError(f"{path} holds no policy for {table.arch}'s families")
    report = replay_benchmark(
        table,
        strategies=list(strategies or settings["strategies"]),
        seeds=seeds or settings["seeds"],
        budget=settings["budget"],
        batch_size=settings["batch"],
        baseline=settings["baseline"],
        target=settings["target"],
        start_policy=start_policy,
        progress=progress,
    )
    report["per_shape"] = per_shape(report)
    report["settings"]["policy"] = (
        "pretrained on the table's other shapes"
        if pretrain_on_table
        else str(policy_path or settings["policy"])
    )
    return report


# -- the command line ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    draw = sub.add_parser("draw", help="draw the shapes and freeze the method (CPU)")
    draw.add_argument("--seed", type=int, required=True)
    draw.add_argument("--out", type=Path, required=True)
    draw.add_argument("--results", type=Path, default=RESULTS)
    builds = sub.add_parser(
        "builds", help="FAMILY:LAYOUT:LIMIT of each family's subset (prepare_device.sh fresh)"
    )
    builds.add_argument("--shapes", type=Path, required=True)
    record = sub.add_parser("record", help="time the table (GPU)")
    record.add_argument("--shapes", type=Path, required=True)
    record.add_argument("--out", type=Path, required=True, help="the table (JSON)")
    record.add_argument("--deadline", type=float, help="start no shape after N seconds")
    record.add_argument("--device-seconds", type=float, default=3.0, help="per shape")
    record.add_argument("--verify-jobs", type=int, default=16)
    record.add_argument("--verdicts", type=Path, help="an earlier sweep report of this machine")
    record.add_argument("--resume", type=Path, help="an earlier table of these shapes to extend")
    replay = sub.add_parser("replay", help="the frozen strategies on the table (CPU)")
    replay.add_argument("--shapes", type=Path, required=True)
    replay.add_argument("--table", type=Path, action="append", required=True)
    replay.add_argument("--out", type=Path, required=True)
    replay.add_argument("--seeds", type=int, help="default: the frozen number")
    replay.add_argument("--strategies", help="default: the frozen ones")
    replay.add_argument("--policy", type=Path, help="default: the frozen shipped policy")
    replay.add_argument("--pretrain-on-table", action="store_true")
    replay.add_argument("--allow-changed-method", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "draw":
        doc = draw_document(seed=args.seed, results=args.results)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        for entry in doc["shapes"]:
            print(f"{entry['shape']:20} {entry['class']}")
        print(f"estimated device time: {doc['estimate']['total_s']:.0f} s; {args.out}")
        return 0
    shapes_doc = json.loads(args.shapes.read_text())
    if args.command == "builds":
        subset = shapes_doc["configs"]["subset"]
        print(" ".join(f"{f}:{shapes_doc['layout']}:{s['kept']}" for f, s in subset.items()))
        return 0
    if args.command == "record":
        plan = record_plan(shapes_doc)
        resume = json.loads(args.resume.read_text()) if args.resume else None
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = record_table(
            shapes_doc,
            shapes_digest=document_digest(args.shapes),
            out=args.out,
            build=gpu_builder(args, plan),
            time_shape=gpu_timer(args.device_seconds),
            deadline=args.deadline,
            resume=resume,
        )
        left = report.get("not_timed", [])
        print(f"timed {len(report['sweep'])} shapes, not timed {len(left)}: {args.out}")
        return 0 if not left else 3
    changed = changed_method(shapes_doc, policy=args.policy)
    if changed and not args.allow_changed_method:
        print("error: the method changed since the draw: " + ", ".join(changed), file=sys.stderr)
        return 2
    strategies = args.strategies.split(",") if args.strategies else None
    report = replay_fresh(
        shapes_doc,
        args.table,
        pretrain_on_table=args.pretrain_on_table,
        seeds=args.seeds,
        strategies=strategies,
        policy_path=args.policy,
        progress=log,
    )
    report["method_changed"] = changed
    report["frozen_commit"] = shapes_doc["method"]["commit"]
    from engine.campaign.replay_benchmark import format_table, write_report

    print(format_per_shape(report["per_shape"], report["settings"]["strategies"]))
    print(format_table(report))
    write_report(report, args.out)
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
