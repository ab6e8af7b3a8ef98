"""``python -m engine prebuild --family sm90 --limit N``: compile a library of family variants."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from engine.codegen import FAMILIES, KernelConfig, get_family
from engine.codegen.library import library
from engine.compilation.compile import CompileResult, compile_many
from engine.config import load as load_config
from engine.problem import Layout, Problem, ProblemError
from engine.propose.mirror import MirrorFileError, exact_mirrors, load_targets


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prebuild", help="compile N sampled variants of a kernel family into the cache"
    )
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--limit", type=int, help="number of variants (default 8; --library: all)")
    parser.add_argument("--layout", default="tn", choices=[x.value for x in Layout])
    parser.add_argument("--shape", help="only variants valid for this MxNxK problem")
    parser.add_argument("--shapes", help="--mirror: only these comma-separated MxNxK problems")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--library",
        action="store_true",
        help="the family's curated library (engine/codegen/library.py) instead of a sample; "
        "with --limit, that many of it, spread over the library",
    )
    parser.add_argument(
        "--mirror",
        type=Path,
        metavar="KERNELS_JSON",
        help="sm90: the exact copies of the kernels cuBLASLt runs on each problem of this "
        "--cublaslt-kernels file in --layout (engine.propose.mirror.exact_mirrors), for a "
        "library-space campaign with --proposers mirror",
    )
    parser.add_argument(
        "--arch", help="build only the SASS this GPU runs, e.g. sm_90 (default: every family arch)"
    )
    parser.add_argument("--jobs", type=int, help="parallel nvcc processes (ENGINE_COMPILE_JOBS)")
    parser.set_defaults(func=run)


def mirror_configs(
    path: Path, family: str, layout: Layout, shapes: list[str]
) -> list[KernelConfig]:
    """The exact mirrors of cuBLASLt's kernels on the file's problems in ``layout`` (only those
    of ``shapes`` when given), each once."""
    if family != "sm90":
        raise SystemExit("error: --mirror copies cuBLASLt's Hopper kernels: use --family sm90")
    try:
        targets = load_targets(path)
    except MirrorFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    configs: dict[str, KernelConfig] = {}
    for key, kernels in targets.items():
        shape, key_layout = key.rsplit("_", 1)
        if key_layout != layout.value or (shapes and shape not in shapes):
            continue
        for config in exact_mirrors(Problem.parse(shape, layout), kernels):
            configs.setdefault(config.name, config)
    return list(configs.values())


def run(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    layout = Layout.parse(args.layout)
    problem = None
    if args.shape:
        try:
            problem = Problem.parse(args.shape, layout)
        except ProblemError as exc:
            raise SystemExit(f"error: {exc}") from None
    if args.mirror:
        shapes = [s.strip() for s in (args.shapes or args.shape or "").split(",") if s.strip()]
        configs = mirror_configs(args.mirror, family.FAMILY, layout, shapes)
    elif args.library:
        configs = [c for c in library(family.FAMILY, layout, args.limit) if c.is_valid(problem)]
    else:
        configs = family.sample(args.limit or 8, problem, layout=layout, seed=args.seed)
    archs = family.archs_for(args.arch)
    config = load_config()
    jobs = args.jobs or config.compile_jobs
    print(
        f"{family.FAMILY}: compiling {len(configs)} variants for {','.join(archs)} "
        f"with {jobs} jobs",
        flush=True,
    )
    lock = threading.Lock()

    def progress(index: int, result: CompileResult) -> None:
        with lock:
            print(format_line(configs[index].name, result), flush=True)

    started = time.monotonic()
    results = compile_many(
        [c.render() for c in configs],
        jobs=jobs,
        archs=archs,
        config=config,
        progress=progress,
    )
    wall = time.monotonic() - started
    built = [r for r in results if r.ok]
    fresh = [r.seconds for r in results if not r.cached]
    mean = sum(fresh) / len(fresh) if fresh else 0.0
    print(
        f"{len(built)}/{len(results)} built in {wall:.1f} s wall; "
        f"{len(fresh)} fresh compiles, mean {mean:.1f} s each",
        flush=True,
    )
    return 0 if len(built) == len(results) else 1


def format_line(name: str, result: CompileResult) -> str:
    status = "ok" if result.ok else ("TIMEOUT" if result.timed_out else "FAIL")
    origin = "cached" if result.cached else "built"
    line = f"{status:7} {result.seconds:7.1f} s  {origin:6}  {name}"
    if result.ok:
        line += f"  regs={result.max_registers}" + ("  SPILLS" if result.spills else "")
    else:
        line += f"\n        {result.error}"
        print(result.log[-2000:], file=sys.stderr)
    return line
