"""``python -m engine prebuild``: compile kernel configs into the compile cache, once.

``--library`` with no ``--family`` builds the curated library (engine/codegen/library.py) of every
family this GPU's arch searches by default (engine.propose.space.families_for_arch), in both
layouts, on every core. Each config is keyed as engine.compilation.compile.config_keys keys it for
the GPU's arch, the key a campaign looks the same config up under, so a campaign finds it built.
What the cache already holds is counted, not rebuilt: a prebuild cut short resumes where it
stopped. Ctrl-C stops the running builds (engine.isolation.processes.stop_children), which are
then not cached; the cache keeps only whole entries (engine.compilation.compile).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from engine.campaign.storage import SqliteStorage
from engine.codegen import FAMILIES, KernelConfig, get_family
from engine.codegen.library import LIBRARIES, library
from engine.compilation.compile import (
    CompileResult,
    build_seconds_prior,
    compile_source,
    config_keys,
    entry_dir,
    try_load,
)
from engine.compilation.toolkit import CompileSetupError
from engine.config import EngineConfig
from engine.config import load as load_config
from engine.execution.final import config_of, top_records
from engine.gpu import cuda_driver
from engine.isolation import processes
from engine.outcomes import CandidateRecord
from engine.problem import Layout, Problem, ProblemError
from engine.propose.mirror import MirrorFileError, exact_mirrors, load_targets
from engine.propose.space import families_for_arch

NO_GPU_ARCH = "sm_90a"  # the arch a prebuild targets on a machine without a GPU
INTERRUPTED_EXIT = 130
STOP_REASON = "prebuild interrupted"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prebuild",
        help="compile kernel configs into the cache: --library for the GPU's whole library",
    )
    parser.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        help="only this family (required without --library); --library without it: every "
        "family the arch searches by default",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="number of variants (default 8; --library: all, else that many of each family's "
        "library in each layout, spread over it)",
    )
    parser.add_argument(
        "--layout",
        choices=[x.value for x in Layout],
        help="only this layout (default: tn; --library: both)",
    )
    parser.add_argument("--shape", help="only variants valid for this MxNxK problem")
    parser.add_argument("--shapes", help="--mirror: only these comma-separated MxNxK problems")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--library",
        action="store_true",
        help="the curated libraries (engine/codegen/library.py) instead of a sample",
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
        "--finals",
        type=Path,
        metavar="DB",
        help="the kernels the finals of this campaign database (engine optimize --db) will "
        "sanitize and re-measure: each shape's --limit (default 3) best verified candidates, "
        "rank by rank, for a finals run on a machine that should spend no time on nvcc",
    )
    parser.add_argument(
        "--arch",
        help=f"the GPU the kernels will run on, e.g. sm_90 (default: this machine's GPU, "
        f"{NO_GPU_ARCH} without one); it picks the families and the SASS built",
    )
    parser.add_argument(
        "--jobs", type=int, help="parallel builds (default: every core, ENGINE_COMPILE_JOBS)"
    )
    parser.set_defaults(func=run)


# -- what to build ---------------------------------------------------------------------------


def target_arch(arch: str | None) -> str:
    """``arch``, else this machine's GPU's, else NO_GPU_ARCH."""
    if arch:
        return arch
    try:
        return cuda_driver.device_arch()
    except cuda_driver.DriverError:
        return NO_GPU_ARCH


def library_families(family: str | None, arch: str) -> tuple[str, ...]:
    """``family``, or the families a campaign on ``arch`` searches by default that have a
    library."""
    if family:
        return (family,)
    return tuple(f for f in families_for_arch(arch) if f in LIBRARIES)


def builds_for(config: KernelConfig, arch: str) -> bool:
    """Whether ``config`` is legal on every arch its family builds for ``arch``."""
    return all(bool(config.is_valid(None, a)) for a in get_family(config.FAMILY).archs_for(arch))


def library_configs(
    families: Sequence[str],
    layouts: Sequence[Layout],
    *,
    arch: str,
    limit: int | None = None,
    shape: str | None = None,
) -> list[KernelConfig]:
    """Each family's library in each layout (``limit`` of each, spread over it) that builds
    for ``arch`` (and is valid for the ``shape`` MxNxK problem in its layout when given),
    family by family."""
    problems = {layout: Problem.parse(shape, layout) if shape else None for layout in layouts}
    return [
        c
        for family in families
        for layout in layouts
        for c in library(family, layout, limit)
        if builds_for(c, arch) and c.is_valid(problems[layout])
    ]


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


FINALS_TOP = 3  # engine optimize's --final-top default


def finals_configs(db: Path, per_shape: int) -> list[KernelConfig]:
    """Each shape's ``per_shape`` best verified candidates in every campaign of ``db``, as
    their finals rank them (engine.execution.final.top_records), best of every shape first;
    model-written kernels are left out (their finals build them as the campaign did)."""
    if not db.is_file():
        raise SystemExit(f"error: no campaign database at {db}")
    storage = SqliteStorage(db)
    try:
        ranked: list[list[CandidateRecord]] = []
        for campaign in storage.campaign_names():
            baseline = str((storage.campaign_settings(campaign) or {}).get("baseline", ""))
            for problem in storage.problems(campaign):
                records = storage.candidates(campaign, problem.key)
                ranked.append(top_records(records, baseline, per_shape))
    finally:
        storage.close()
    return [
        config_of(shape[rank])
        for rank in range(per_shape)
        for shape in ranked
        if rank < len(shape) and shape[rank].source is None
    ]


def chosen_configs(args: argparse.Namespace, arch: str) -> list[KernelConfig]:
    if args.finals:
        configs = finals_configs(args.finals, args.limit or FINALS_TOP)
        return [c for c in {c.name: c for c in configs}.values() if builds_for(c, arch)]
    if not args.library and not args.family:
        raise SystemExit("error: --family is required without --library")
    layouts = [Layout.parse(args.layout)] if args.layout else None
    problem = None
    if args.shape:
        try:
            problem = Problem.parse(args.shape, layouts[0] if layouts else Layout.TN)
        except ProblemError as exc:
            raise SystemExit(f"error: {exc}") from None
    if args.mirror:
        shapes = [s.strip() for s in (args.shapes or args.shape or "").split(",") if s.strip()]
        layout = layouts[0] if layouts else Layout.TN
        return mirror_configs(args.mirror, args.family, layout, shapes)
    if args.library:
        families = library_families(args.family, arch)
        if not families:
            raise SystemExit(f"error: no family with a library runs on {arch}")
        return library_configs(
            families, layouts or list(Layout), arch=arch, limit=args.limit, shape=args.shape
        )
    layout = layouts[0] if layouts else Layout.TN
    family = get_family(args.family)
    return family.sample(args.limit or 8, problem, layout=layout, seed=args.seed)


# -- progress --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    name: str
    error: str


@dataclass
class Progress:
    """A prebuild's counts as its builds finish: the numbers of its progress line and summary.

    ``left``: per family, the builds not yet done; ``cut``: builds stopped by an interruption,
    which left nothing in the cache."""

    left: dict[str, int]
    jobs: int
    started: float = field(default_factory=time.monotonic)
    cached: int = 0
    built: int = 0
    failed: list[Failure] = field(default_factory=list)
    cached_failed: list[Failure] = field(default_factory=list)  # failed in an earlier build
    cut: int = 0
    seconds: dict[str, list[float]] = field(default_factory=dict)  # fresh builds' own times
    total: int = field(init=False)

    def __post_init__(self) -> None:
        self.total = sum(self.left.values())

    @property
    def done(self) -> int:
        return self.cached + self.built + len(self.failed)

    @property
    def build_seconds(self) -> list[float]:
        return [s for family in self.seconds.values() for s in family]

    def count(
        self, family: str, name: str, result: CompileResult, *, interrupted: bool = False
    ) -> str:
        """Counts one build's result; returns its kind: cached, built, failed or cut."""
        if interrupted and not result.ok and not result.cached and result.entry is None:
            self.cut += 1
            return "cut"
        self.left[family] -= 1
        if result.cached:
            self.cached += 1
            if not result.ok:
                self.cached_failed.append(Failure(name, result.error or "failed"))
            return "cached"
        self.seconds.setdefault(family, []).append(result.seconds)
        if result.ok:
            self.built += 1
            return "built"
        self.failed.append(Failure(name, result.error or "failed"))
        return "failed"

    def seconds_per_build(self, family: str | None = None) -> float:
        """The mean of this run's builds (of ``family``), before the first has finished the
        family's prior (engine.compilation.compile.build_seconds_prior)."""
        times = self.build_seconds if family is None else self.seconds.get(family, [])
        if not times:
            return build_seconds_prior(family)
        return sum(times) / len(times)

    def eta_seconds(self) -> float:
        """The builds left at their family's mean, spread over ``jobs`` (at least the longest
        of them)."""
        means = [(n, self.seconds_per_build(f)) for f, n in self.left.items() if n > 0]
        work = sum(n * mean for n, mean in means)
        return max(work / max(1, self.jobs), max((mean for _, mean in means), default=0.0))

    def line(self, now: float | None = None) -> str:
        """``[done/total pct%] built, cached, failed | elapsed, ETA``."""
        now = time.monotonic() if now is None else now
        width = len(str(self.total))
        percent = 100 * self.done // max(1, self.total)
        return (
            f"[{self.done:>{width}}/{self.total} {percent:3d}%] {self.built} built, "
            f"{self.cached} cached, {len(self.failed)} failed | "
            f"{clock(now - self.started)} elapsed, ETA {clock(self.eta_seconds())}"
        )


class ProgressPrinter:
    """Writes the progress line after each build: on a terminal one line redrawn in place, in
    a pipe or a file one line a build naming it. Failures get a line of their own in both."""

    def __init__(self, progress: Progress, stream: TextIO, *, redraw: bool) -> None:
        self.progress = progress
        self.stream = stream
        self.redraw = redraw
        self._drawn = False

    def finished(self, name: str, result: CompileResult) -> None:
        line = self.progress.line()
        if not result.ok:
            self._clear()
            cut = result.entry is None and not result.cached
            status = "FAILED (not cached)" if cut else "FAILED"
            self.stream.write(f"{status} {name}\n    {result.error}\n")
        if self.redraw:
            columns = shutil.get_terminal_size().columns
            self.stream.write("\r" + line[: columns - 1].ljust(columns - 1))
            self._drawn = True
        else:
            self.stream.write(f"{line} | {describe(name, result)}\n")
        self.stream.flush()

    def end(self) -> None:
        self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self._drawn = False


def describe(name: str, result: CompileResult) -> str:
    origin = "cached" if result.cached else f"{result.seconds:.1f} s"
    if not result.ok:
        return f"{name} failed ({origin})"
    spills = " SPILLS" if result.spills else ""
    return f"{name} ok ({origin}, regs={result.max_registers}{spills})"


def clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# -- building --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    config: KernelConfig
    key: str  # the compile cache's key for the config on the target arch
    archs: tuple[str, ...]


def plan(configs: Sequence[KernelConfig], *, arch: str, config: EngineConfig) -> list[Build]:
    """Each config once, with the key and archs a campaign on ``arch`` compiles it under."""
    unique = list({c.name: c for c in configs}.values())
    keys = config_keys(unique, config=config, target_arch=arch)
    return [
        Build(c, key, get_family(c.FAMILY).archs_for(arch))
        for c, key in zip(unique, keys, strict=True)
    ]


def build_all(
    builds: Sequence[Build],
    *,
    jobs: int,
    config: EngineConfig,
    finished: Callable[[Build, CompileResult, bool], None],
) -> bool:
    """Builds ``builds`` on ``jobs`` threads, each driving nvcc (or Triton) in its own process
    group, calling ``finished(build, result, interrupted)`` in this thread as each ends. On
    Ctrl-C, stops the running builds (they are not cached) and the queued ones, reports what
    ended, and returns True."""
    if not builds:
        return False
    pool = ThreadPoolExecutor(max_workers=min(jobs, len(builds)))
    futures: dict[Future[CompileResult], Build] = {
        pool.submit(compile_source, b.config.render(), archs=b.archs, config=config): b
        for b in builds
    }
    reported: set[Future[CompileResult]] = set()
    try:
        for future in as_completed(futures):
            reported.add(future)
            finished(futures[future], future.result(), False)
    except KeyboardInterrupt:
        processes.stop_children(STOP_REASON)
        pool.shutdown(wait=True, cancel_futures=True)
        processes.allow_children()
        for future, build in futures.items():
            if future not in reported and future.done() and not future.cancelled():
                finished(build, future.result(), True)
        return True
    finally:  # all done, or a build raised (a setup error): the queued ones need not run
        pool.shutdown(wait=True, cancel_futures=True)
    return False


def disk_bytes(paths: Sequence[Path]) -> int:
    """The bytes of every file under ``paths`` (missing ones count 0)."""
    total = 0
    for path in paths:
        for folder, _, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):  # removed since the walk listed it
                    total += os.lstat(os.path.join(folder, name)).st_size
    return total


def size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def summary(
    progress: Progress,
    *,
    builds: Sequence[Build],
    config: EngineConfig,
    interrupted: bool,
    now: float | None = None,
) -> str:
    now = time.monotonic() if now is None else now
    total = len(builds)
    means = ", ".join(f"{f} {progress.seconds_per_build(f):.1f} s" for f in progress.seconds)
    mean = f"; a build took {means}" if means else ""
    left = total - progress.done  # stopped (never cached) or never started
    lines = [
        ("interrupted: " if interrupted else "")
        + f"{progress.built} built, {progress.cached} cached, {len(progress.failed)} failed"
        + (f", {left} left to build" if left else "")
        + f" of {total}; {clock(now - progress.started)} wall on {progress.jobs} jobs{mean}"
    ]
    for failure in progress.failed:
        lines.append(f"  failed: {failure.name}: {failure.error}")
    for failure in progress.cached_failed:
        lines.append(f"  failed in an earlier build (cached): {failure.name}: {failure.error}")
    ours = disk_bytes([entry_dir(b.key, config) for b in builds])
    whole = disk_bytes([config.kernel_cache])
    lines.append(f"on disk: {size(ours)} for these, {size(whole)} in {config.kernel_cache}")
    if interrupted:
        lines.append("run the same command again to resume: what is cached is not rebuilt")
    return "\n".join(lines)


def header(
    configs: Sequence[KernelConfig], builds: Sequence[Build], progress: Progress, arch: str
) -> str:
    counts: dict[str, int] = {}
    for c in configs:
        label = f"{c.FAMILY} {c.layout.value}"
        counts[label] = counts.get(label, 0) + 1
    parts = ", ".join(f"{label} {n}" for label, n in counts.items())
    left = len(builds) - progress.cached
    priors = ", ".join(
        f"{family} {progress.seconds_per_build(family):.0f} s"
        for family, n in progress.left.items()
        if n > 0
    )
    return (
        f"prebuild for {arch}: {len(builds)} configs ({parts}); {progress.cached} in the cache, "
        f"{left} to build on {progress.jobs} jobs, about {clock(progress.eta_seconds())}"
        + (f" (a build: {priors})" if priors else "")
    )


def run(args: argparse.Namespace, *, stream: TextIO | None = None) -> int:
    stream = stream or sys.stdout
    arch = target_arch(args.arch)
    configs = chosen_configs(args, arch)
    config = load_config()
    jobs = max(1, args.jobs or config.compile_jobs)
    try:
        builds = plan(configs, arch=arch, config=config)
    except CompileSetupError as exc:
        raise SystemExit(f"error: {exc}") from None
    left: dict[str, int] = {}
    for build in builds:
        left[build.config.FAMILY] = left.get(build.config.FAMILY, 0) + 1
    progress = Progress(left=left, jobs=jobs)
    todo = []
    for build in builds:
        if (hit := try_load(build.key, config)) is not None:
            progress.count(build.config.FAMILY, build.config.name, hit)
        else:
            todo.append(build)
    print(header(configs, builds, progress, arch), file=stream, flush=True)
    printer = ProgressPrinter(progress, stream, redraw=stream.isatty())

    def finished(build: Build, result: CompileResult, interrupted: bool) -> None:
        kind = progress.count(
            build.config.FAMILY, build.config.name, result, interrupted=interrupted
        )
        if kind == "cut":
            return
        printer.finished(build.config.name, result)
        if kind == "failed" and result.log:
            print(result.log[-2000:], file=sys.stderr)

    interrupted = build_all(todo, jobs=jobs, config=config, finished=finished)
    printer.end()
    print(
        summary(progress, builds=builds, config=config, interrupted=interrupted),
        file=stream,
        flush=True,
    )
    if interrupted:
        return INTERRUPTED_EXIT
    return 0 if not progress.failed and not progress.cached_failed else 1
