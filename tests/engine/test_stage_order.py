"""engine/ is layered: a module imports from its own stage, the stages before it and the top-level
vocabulary, never from a later stage, and no set of modules imports itself round in a circle.
Function-local imports count: a circle through a call-time import is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"
# The order a candidate meets the stages (engine/__init__.py); the top level (problem, config,
# outcomes, abi, stats) comes before all of them, commands and the CLI after.
STAGES = (
    "isolation", "codegen", "compilation", "gpu", "verify", "timing", "execution",
    "propose", "llm", "campaign", "publish", "commands",
)  # fmt: skip
TOP_LEVEL_LAST = {"cli", "__main__"}  # the entry points see everything


def module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_modules() -> dict[str, Path]:
    return {module_name(p): p for p in ENGINE.rglob("*.py")}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The engine modules ``name`` imports anywhere in its body (``from pkg import mod`` counts
    as importing ``pkg.mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def rank(module: str) -> int:
    """-1 for the top-level vocabulary, the stage's index, len(STAGES) for the entry points."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    if parts[1] in TOP_LEVEL_LAST:
        return len(STAGES)
    if parts[1] in STAGES:
        return STAGES.index(parts[1])
    return -1  # a top-level module (engine.problem, engine.stats, ...)


def import_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_engine_folder_is_a_known_stage():
    folders = {p.name for p in ENGINE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(STAGES)


def test_no_module_imports_from_a_later_stage():
    upward = [
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        for target in targets
        if rank(target) > rank(name)
    ]
    assert upward == []


def test_there_is_no_import_circle_in_engine():
    assert circles(import_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_the_circle_finder_finds_circles(graph, expected):
    assert circles(graph) == expected


def test_an_upward_import_ranks_above_its_importer():
    assert rank("engine.execution.final") > rank("engine.verify.sanitize")
    assert rank("engine.stats") < rank("engine.verify.timed_checks")
