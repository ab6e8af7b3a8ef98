"""The triton family on the grid's latency-bound and long-K small-M·N shapes, in one
GPU call — Inductor's own configs (what ``max-autotune`` tries with its Triton template) and a
small sweep of what it does not try (split-K reduced by the last split, lean tiles, persistent
TMA), verified and timed in the device protocol beside cuBLASLt-autotune and our current best
kernel of the shape (rebuilt from the grid64 campaign's records, timed in the same session).

    python3 bench/triton_bench.py [--report REPORT.json] [--db CAMPAIGN.sqlite]
        [--shapes 64x256x128_nn,...] [--limit N] [--sweep N] [--no-best] [--fixed-nk]
        [--verify-jobs 16] [--device-seconds 1] [--heat-seconds 0.5] [--deadline S] [--out FILE]

Default shapes: those of the report whose cuBLASLt-autotune device time is under 15 µs, then
the long-K small-M·N ones (deep_splitk's). Per shape the JSON has each candidate's speedup over
cuBLASLt-autotune, the best of Inductor's configs (the Triton kernel max-autotune would keep
among its own), the best of the whole family, and our best kernel's, all from one process.
``--fixed-nk`` adds each of those configs built for the shape's N and K as constants (the
family's ``fixed_n``/``fixed_k``, as Inductor compiles a shape) and reports each such twin's
speedup over its run-time-N/K twin (``fixed_nk_ratios``, and their geomean per shape).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.deep_splitk import SHAPES as LONG_K_SHAPES  # noqa: E402
from engine.campaign.storage import SqliteStorage  # noqa: E402
from engine.codegen import KernelConfig, TritonConfig, get_family  # noqa: E402
from engine.codegen.library import TRITON_LEAN_TILES, library  # noqa: E402
from engine.codegen.triton import inductor_configs  # noqa: E402
from engine.compilation.compile import compile_configs  # noqa: E402
from engine.execution.final import remeasure_batch  # noqa: E402
from engine.gpu import cuda_driver  # noqa: E402
from engine.problem import Problem  # noqa: E402
from engine.timing.baseline_names import INDUCTOR, TORCH_TUNED  # noqa: E402
from engine.verify.verifier import Verifications, new_fork_server  # noqa: E402

BASELINE = "cublaslt_autotune"
REPORT = ROOT / "bench/results/2026-12-05-grid64-report/report.json"
DB = ROOT / "bench/results/grid64/campaign.sqlite"
LATENCY_BOUND_S = 15e-6
SM_COUNT = 132  # H100/H200 SXM


def default_shapes(report: dict[str, Any]) -> list[Problem]:
    """The report's latency-bound shapes (fastest first), then the long-K small-M·N ones."""
    timed = []
    for key, shape in report["shapes"].items():
        device = shape["protocols"].get("device") or {}
        lt = (device.get("baselines") or {}).get(BASELINE)
        if lt is not None and lt < LATENCY_BOUND_S:
            timed.append((lt, key))
    keys = [key for _, key in sorted(timed)]
    keys += [f"{s}_nn" for s in LONG_K_SHAPES.split(",") if f"{s}_nn" not in keys]
    return [problem_of(key) for key in keys]


def problem_of(key: str) -> Problem:
    shape, _, layout = key.partition("_")
    return Problem.parse(shape, layout or "nn")


def sweep_configs(problem: Problem, count: int) -> list[TritonConfig]:
    """What Inductor does not try, for ``problem``: the library's split-K configs whose tiles ×
    splits fill the GPU about once (0.5–2 waves) where the tiles alone leave most SMs idle,
    its lean tiles (with and without group-M order), and its persistent TMA configs where there
    are more tiles than SMs; at most ``count``, in that order."""
    inductor = {c.name for c in inductor_configs(problem)}
    tiles = {}
    chosen: list[TritonConfig] = []
    for c in library("triton", problem.layout):
        if c.name in inductor or not c.is_valid(problem):
            continue
        tiles[c.name] = math.ceil(problem.m / c.tile_m) * math.ceil(problem.n / c.tile_n)
    configs = [c for c in library("triton", problem.layout) if c.name in tiles]
    split = [
        c
        for c in configs
        if c.splits > 1
        and tiles[c.name] < SM_COUNT / 2
        and SM_COUNT / 2 <= tiles[c.name] * c.splits <= 2 * SM_COUNT
    ]
    lean = [
        c
        for c in configs
        if (c.tile_m, c.tile_n, c.tile_k, c.stages, c.warps) in TRITON_LEAN_TILES and c.splits == 1
    ]
    persistent = [c for c in configs if c.schedule == "persistent" and tiles[c.name] > SM_COUNT]
    for group in (split, lean, persistent):
        chosen += group
    return chosen[:count]


def fixed_nk_twins(problem: Problem, sets: dict[str, list[TritonConfig]]) -> list[TritonConfig]:
    """Every config of ``sets`` built for ``problem``'s N and K as constants."""
    twins = (replace(c, fixed_n=problem.n, fixed_k=problem.k) for cs in sets.values() for c in cs)
    return list({t.name: t for t in twins if t.is_valid(problem)}.values())


def fixed_nk_ratios(speedups: dict[str, float], fixed: list[TritonConfig]) -> dict[str, float]:
    """Each fixed-N/K config's speedup over its twin's with N and K at run time (both timed)."""
    out = {}
    for config in fixed:
        generic = replace(config, fixed_n=0, fixed_k=0).name
        if config.name in speedups and generic in speedups:
            out[config.name] = speedups[config.name] / speedups[generic]
    return out


def best_configs(db: Path, report: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """Our best kernel per problem (the report's device-protocol kernel), as a config rebuilt
    from the campaign's records."""
    wanted = {}
    for p in problems:
        device = report["shapes"].get(p.key, {}).get("protocols", {}).get("device") or {}
        if device.get("kernel"):
            wanted[p.key] = device["kernel"]
    found: dict[str, KernelConfig] = {}
    storage = SqliteStorage(db)
    try:
        for campaign in storage.campaign_names():
            for problem in storage.problems(campaign):
                name = wanted.get(problem.key)
                if name is None or problem.key in found:
                    continue
                for record in storage.candidates(campaign, problem.key):
                    if record.name == name and record.source is None:
                        knobs = {**record.knobs, "layout": problem.layout.value}
                        found[problem.key] = get_family(record.family).from_knobs(knobs)
                        break
    finally:
        storage.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--db", type=Path, default=DB, help="the grid64 campaign database")
    parser.add_argument("--shapes", help="MxNxK_layout, comma separated (default: see above)")
    parser.add_argument("--limit", type=int, help="only the first N shapes")
    parser.add_argument("--sweep", type=int, default=10, help="sweep configs per shape")
    parser.add_argument("--no-best", action="store_true", help="do not time our best kernel")
    parser.add_argument(
        "--fixed-nk",
        action="store_true",
        help="also time every config built for the shape's N and K as constants",
    )
    parser.add_argument(
        "--torch-baselines",
        action="store_true",
        help="also tune and time Inductor max-autotune and TunableOp (seconds a shape each)",
    )
    parser.add_argument("--verify-jobs", type=int, default=16)
    parser.add_argument("--device-seconds", type=float, default=1.0)
    parser.add_argument("--heat-seconds", type=float, default=0.5)
    parser.add_argument("--deadline", type=float, default=450.0, help="seconds for the whole run")
    parser.add_argument("--chunk", type=int, default=6, help="shapes verified, then timed, at once")
    parser.add_argument("--out", type=Path, default=Path("triton.json"))
    args = parser.parse_args(argv)
    started = time.monotonic()

    def elapsed() -> str:
        return f"[{time.monotonic() - started:5.0f} s]"

    report = json.loads(args.report.read_text())
    problems = (
        [problem_of(k) for k in args.shapes.split(",")] if args.shapes else default_shapes(report)
    )[: args.limit]
    candidates = {
        p.key: {"inductor": inductor_configs(p), "sweep": sweep_configs(p, args.sweep)}
        for p in problems
    }
    if args.fixed_nk:
        for p in problems:
            candidates[p.key]["fixed"] = fixed_nk_twins(p, candidates[p.key])
    triton = {c.name: c for sets in candidates.values() for cs in sets.values() for c in cs}
    best = {} if args.no_best else best_configs(args.db, report, problems)
    arch = cuda_driver.local_arch()
    built: dict[str, Path] = {}
    errors: dict[str, str] = {}

    def build(configs: list[KernelConfig], jobs: int) -> None:
        results = compile_configs(configs, jobs=jobs, target_arch=arch)
        for config, result in zip(configs, results, strict=True):
            if result.ok:
                built[config.name] = result.library
            else:
                errors[config.name] = result.error or "build failed"

    # our best kernels (CUTLASS: 35–70 s each) compile one by one beside the Triton ones (≈ 5 s
    # each), in the shapes' order, so that the first shapes' are ready first
    best_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="best-build")
    for config in {c.name: c for c in best.values()}.values():
        best_pool.submit(build, [config], 1)
    build(list(triton.values()), 8)
    print(
        f"{elapsed()} {len(problems)} shapes, {len(triton)} triton configs "
        f"({sum(n in built for n in triton)} built), {len(best)} best kernels building",
        flush=True,
    )
    server, folder = new_fork_server(start=True)
    verdicts: dict[str, dict[str, str]] = {}
    shapes: list[dict[str, Any]] = []
    environment = None
    chunk_seconds: list[float] = []
    try:
        # verify, then time, a few shapes at a time: whatever the deadline leaves out is
        # missing whole, never timed without its baselines; our best joins once it is built
        for i in range(0, len(problems), args.chunk):
            expected = max(chunk_seconds, default=0.0)
            if time.monotonic() - started + expected > args.deadline:
                print(f"{elapsed()} stopped by the deadline: {problems[i].key} on", flush=True)
                break
            clock = time.monotonic()
            chunk = problems[i : i + args.chunk]
            jobs = []
            for p in chunk:
                names = [c.name for cs in candidates[p.key].values() for c in cs]
                if p.key in best:  # when it is built by now
                    names.append(best[p.key].name)
                names = [n for n in dict.fromkeys(names) if n in built]
                if not names:
                    continue
                batch = Verifications(
                    [built[n] for n in names], p, jobs=args.verify_jobs, fork_server=server
                )
                ok = {}
                for name, result in zip(names, batch.results(), strict=True):
                    verdicts.setdefault(p.key, {})[name] = result.reason
                    if result.ok:
                        ok[name] = built[name]
                if ok:
                    jobs.append((p, ok))
            records = remeasure_batch(
                jobs,
                protocols=("device",),
                device_seconds=args.device_seconds,
                heat_seconds=args.heat_seconds,
                probe_overhead=False,
                extra_baselines=TORCH_TUNED if args.torch_baselines else (),
            )
            for (p, _), record in zip(jobs, records, strict=True):
                environment = environment or record.get("environment")
                shapes.append(summarize(p, record, candidates[p.key], best.get(p.key), report))
                print(format_row(shapes[-1]), flush=True)
            chunk_seconds.append(time.monotonic() - clock)
            print(
                f"{elapsed()} chunk of {len(chunk)} shapes: {chunk_seconds[-1]:.0f} s", flush=True
            )
    finally:
        server.close()
        folder.cleanup()
        best_pool.shutdown(wait=False, cancel_futures=True)
    out = {
        "what": "triton family vs cuBLASLt-autotune and our best, latency-bound and long-K "
        "small-M·N grid shapes (issue 36)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "baseline": BASELINE,
        "protocol": f"device (a finals child every {args.chunk} shapes; heat "
        f"{args.heat_seconds} s, up to {args.device_seconds} s a shape)",
        "seconds": round(time.monotonic() - started, 1),
        "environment": environment,
        "build_errors": errors,
        "verdicts": verdicts,
        "shapes": shapes,
        "geomean": geomeans(shapes),
    }
    args.out.write_text(json.dumps(out, indent=1))
    print(f"{elapsed()} wrote {args.out}", flush=True)
    return 0


def summarize(
    problem: Problem,
    record: dict[str, Any],
    candidates: dict[str, list[TritonConfig]],
    best: KernelConfig | None,
    report: dict[str, Any],
) -> dict[str, Any]:
    if "error" in record:
        return {"problem": problem.key, "error": record["error"]}
    device = record["protocols"]["device"]
    speedups = {n: s[BASELINE] for n, s in device["speedups"].items()}
    inductor = {c.name for c in candidates["inductor"]}
    sweep = {c.name for c in candidates["sweep"]}

    def top(names: set[str]) -> tuple[str | None, float | None]:
        timed = {n: speedups[n] for n in names if n in speedups}
        name = max(timed, key=timed.get, default=None)
        return name, timed.get(name) if name else None

    inductor_best, inductor_speedup = top(inductor)
    family_best, family_speedup = top(inductor | sweep)
    fixed = fixed_nk_ratios(speedups, candidates.get("fixed", []))
    ours = best.name if best is not None and best.name in speedups else None
    recorded = report["shapes"].get(problem.key, {}).get("protocols", {}).get("device") or {}
    return {
        "problem": problem.key,
        "cublaslt_autotune_s": device["best_baselines"][BASELINE]["seconds"],
        "speedups": speedups,
        "inductor_best": inductor_best,
        "inductor_best_speedup": inductor_speedup,
        "triton_best": family_best,
        "triton_best_speedup": family_speedup,
        "ours": ours,
        "ours_speedup": speedups.get(ours) if ours else None,
        "ours_recorded_speedup": (recorded.get("speedups") or {}).get(BASELINE),
        # with --torch-baselines: Inductor max-autotune itself, over cuBLASLt-autotune
        "inductor_max_autotune_speedup": _baseline_ratio(device, INDUCTOR),
        "rejected_while_timed": device.get("rejected_while_timed", []),
        "fixed_nk_ratios": fixed,
        "fixed_nk_geomean": (
            math.exp(sum(map(math.log, fixed.values())) / len(fixed)) if fixed else None
        ),
    }


def _baseline_ratio(device: dict[str, Any], name: str) -> float | None:
    best = device.get("best_baselines", {})
    if name not in best or BASELINE not in best:
        return None
    return best[BASELINE]["seconds"] / best[name]["seconds"]


def geomeans(shapes: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    keys = ("inductor_best_speedup", "triton_best_speedup", "ours_speedup")
    for key in (*keys, "inductor_max_autotune_speedup"):
        values = [s[key] for s in shapes if s.get(key)]
        out[key] = math.exp(sum(map(math.log, values)) / len(values)) if values else None
    both = [s for s in shapes if s.get("ours_speedup") and s.get("triton_best_speedup")]
    if both:
        best_of = [max(s["ours_speedup"], s["triton_best_speedup"]) for s in both]
        out["best_of_ours_and_triton"] = math.exp(sum(map(math.log, best_of)) / len(best_of))
    return out


def format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['problem']}: {row['error'][:200]}"

    def ratio(value: float | None) -> str:
        return f"{value:.3f}x" if value else "  -   "

    return (
        f"{row['problem']:>20} Lt-autotune {row['cublaslt_autotune_s'] * 1e6:7.2f} µs | "
        f"inductor cfgs {ratio(row['inductor_best_speedup'])} "
        f"triton {ratio(row['triton_best_speedup'])}"
        f" ({row['triton_best']}) | ours {ratio(row['ours_speedup'])}"
        f" (recorded {ratio(row['ours_recorded_speedup'])})"
        + (f" | fixed N,K / run-time {ratio(g)}" if (g := row.get("fixed_nk_geomean")) else "")
    )


if __name__ == "__main__":
    sys.exit(main())
