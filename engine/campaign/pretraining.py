"""What the shipped policy learns from: every recorded sweep table, speedup table and searched
campaign, as (problem, search space, log-speedup per config) tasks for
engine.propose.policy.Policy.pretrain; and what the seed proposer starts CUTLASS from: every
recorded cuBLASLt kernel (engine.propose.seed.RECORDED_KERNELS)."""

from __future__ import annotations

import functools
import json
import lzma
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.campaign.storage import SqliteStorage
from engine.codegen import KernelConfig, get_family
from engine.codegen.library import LIBRARIES, library, longk_pull_library
from engine.codegen.triton import inductor_configs, inductor_split_configs
from engine.execution.executor import ReplayTable
from engine.outcomes import CandidateStatus
from engine.problem import Layout, Problem
from engine.propose.mirror import Kernel, MirrorFileError, load_targets
from engine.propose.policy import Policy
from engine.propose.space import SearchSpace

Task = tuple[Problem, SearchSpace, Mapping[str, float]]


def read_text(path: Path) -> str:
    """A results file's text; ``.xz`` files (large tables are committed compressed) unpacked."""
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode()
    return path.read_text()


def _json_files(results: Path, marker: str) -> list[tuple[Path, Any]]:
    """(path, parsed JSON) of the files under ``results`` (``.json``, or ``.json.xz``) whose text
    holds ``marker``."""
    out = []
    for path in sorted([*results.rglob("*.json"), *results.rglob("*.json.xz")]):
        try:
            text = read_text(path)
        except (OSError, lzma.LZMAError):
            continue
        if marker not in text:
            continue
        try:
            out.append((path, json.loads(text)))
        except ValueError:
            continue
    return out


def sweep_tables(results: Path) -> list[Path]:
    """JSON files holding a sweep (``configs`` and ``sweep``), in name order."""
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


def speedup_tables(results: Path) -> list[Path]:
    """JSON files holding speedups per problem (bench/triton_bench.py's format: ``baseline``,
    ``environment``, ``shapes`` of ``problem`` and ``speedups`` by config name), in name order."""
    out = []
    for path, data in _json_files(results, '"speedups"'):
        shapes = data.get("shapes") if isinstance(data, dict) else None
        if (
            isinstance(shapes, list)
            and "baseline" in data
            and all(isinstance(s, dict) and "problem" in s and "speedups" in s for s in shapes)
        ):
            out.append(path)
    return out


@functools.cache
def _library_by_name(layout: Layout) -> dict[str, KernelConfig]:
    """Every curated config by name, and the longk pull configs whose tilings the library now
    reduces by send: the tables measured before hold their names (the policy's features are
    the same for both reductions)."""
    configs = {c.name: c for family in LIBRARIES for c in library(family, layout)}
    for config in longk_pull_library(layout):
        configs.setdefault(config.name, config)
    return configs


def named_configs(problem: Problem) -> dict[str, KernelConfig]:
    """The configs a speedup table may name for ``problem``, by name: every curated library's
    and Inductor's own (plain and split-K)."""
    configs = dict(_library_by_name(problem.layout))
    for config in [*inductor_configs(problem), *inductor_split_configs(problem)]:
        configs.setdefault(config.name, config)
    return configs


def speedup_table_tasks(path: Path, baseline: str) -> tuple[str, list[Task], int]:
    """(arch, one task per problem, how many named configs this engine does not know) of a
    speedup table; no task where the table's speedups are over another baseline."""
    data = json.loads(read_text(path))
    arch = str((data.get("environment") or {}).get("arch") or "sm_90")
    if data.get("baseline") != baseline:
        return arch, [], 0
    tasks: list[Task] = []
    unknown = 0
    for shape in data["shapes"]:
        shape_text, _, layout = str(shape["problem"]).partition("_")
        problem = Problem.parse(shape_text, layout or "nn")
        named = named_configs(problem)
        configs, rewards = [], {}
        for name, speedup in (shape.get("speedups") or {}).items():
            config = named.get(name)
            if config is None:
                unknown += 1
                continue
            if speedup and speedup > 0:
                configs.append(config)
                rewards[name] = math.log(speedup)
        space = SearchSpace.from_configs(problem, configs)
        rewards = {n: r for n, r in rewards.items() if n in space}
        if rewards:
            tasks.append((problem, space, rewards))
    return arch, tasks, unknown


def cublaslt_kernel_files(results: Path) -> list[Path]:
    """JSON files recording cuBLASLt's kernels (bench/cublaslt_kernels.py's, or a campaign's
    results whose finals recorded them), in name order."""
    out = []
    for path, data in _json_files(results, "cublaslt"):
        if not isinstance(data, dict):
            continue
        kernels, final = data.get("kernels"), data.get("final")
        if (
            isinstance(kernels, dict)
            and any(isinstance(k, dict) and "heuristic" in k for k in kernels.values())
        ) or (
            isinstance(final, dict)
            and any(isinstance(f, dict) and f.get("cublaslt_kernels") for f in final.values())
        ):
            out.append(path)
    return out


def recorded_cublaslt_kernels(paths: list[Path]) -> dict[str, list[Kernel]]:
    """Problem key → cuBLASLt's kernels over ``paths`` (engine.propose.mirror.load_targets);
    a file it cannot read is left out."""
    readable = []
    for path in paths:
        try:
            load_targets(path)
        except MirrorFileError:
            continue
        readable.append(path)
    return load_targets(*readable) if readable else {}


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


def fits(policy: Policy, task: Task) -> bool:
    return all(c.FAMILY in policy.families for c in task[1].configs)
