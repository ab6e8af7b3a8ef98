"""What the shipped policy learns from: every recorded sweep table and searched campaign, as
(problem, search space, log-speedup per config) tasks for engine.propose.policy.Policy.pretrain."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from engine.campaign.storage import SqliteStorage
from engine.codegen import get_family
from engine.execution.executor import ReplayTable
from engine.outcomes import CandidateStatus
from engine.problem import Problem
from engine.propose.policy import Policy
from engine.propose.space import SearchSpace

Task = tuple[Problem, SearchSpace, Mapping[str, float]]


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
