"""Loading a script of bench/ (not a package) as a module, for the tests of its logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(script: str) -> ModuleType:
    """bench/<script>.py (``script`` may name a folder: "stack/stack_run") as a module named after
    the file (registered in sys.modules: dataclasses look it up)."""
    name = Path(script).name
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{script}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
