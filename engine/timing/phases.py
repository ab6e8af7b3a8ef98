"""Where a step's wall time goes: seconds per named phase, and a few facts beside them.

A GPU step (engine.execution.gpu_step, the web app's runner) fills one :class:`Phases`: each phase
is a stretch of the step's own thread, so the phases add up to the step's wall time (what no phase
claims is ``other``). Work that runs beside that thread (the verification children while the
parent sets up its measurement) is reported in ``info``, not as a phase.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

# the order reports list them in: the step's life from the worker's point of view
PHASES = (
    "artifact_fetch",  # the worker installing its batch's libraries from the artifact store
    "child_start",  # the child's interpreter, its sandbox and its module imports
    "compile_lookup",  # this GPU's arch (libcuda), the batch's libraries from the compile cache
    "imports",  # building the executor (torch loads later, when the executor first times)
    "setup",  # measurement set-up: cuBLAS shim, environment, operands, cached baselines
    "verification",  # waiting for the verification children (what the set-up did not hide)
    "baselines",  # baseline runners and cuBLASLt autotuning (when not cached)
    "warm_up",
    "heat_up",
    "timing",  # the timing protocols and the spot checks after them
    "child_exit",  # from the child's last write to the worker seeing it gone
    "health_probe",
    "record",  # storing the outcomes
    "other",
)


class Phases:
    """Seconds per phase (a phase entered twice adds up) and ``info`` (facts, not seconds)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.info: dict[str, Any] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def merge(self, seconds: Mapping[str, float]) -> None:
        for name, value in seconds.items():
            self.add(name, float(value))

    def close(self, total: float) -> None:
        """Books what no other phase claimed of ``total`` wall seconds as ``other`` (which
        then holds what a merged child left unclaimed too)."""
        claimed = sum(v for k, v in self.seconds.items() if k != "other")
        self.seconds["other"] = max(0.0, total - claimed)

    def to_dict(self) -> dict[str, float]:
        order = {name: i for i, name in enumerate(PHASES)}
        names = sorted(self.seconds, key=lambda n: (order.get(n, len(order)), n))
        return {name: round(self.seconds[name], 3) for name in names}
