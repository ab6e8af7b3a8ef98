"""The reinforcement-learning reward of a timed candidate: the log speedup over a baseline."""

from __future__ import annotations

import math

from engine.execution.executor import Outcome


def reward_of(outcome: Outcome, baseline: str, failure_reward: float) -> float:
    """log(baseline time / candidate time) in the executor's protocol; ``failure_reward`` for a
    failure (compile error, rejection, timeout, missing)."""
    if not outcome.ok or outcome.seconds is None or outcome.seconds <= 0:
        return failure_reward
    if baseline not in outcome.baselines:
        raise ValueError(f"{outcome.name}: no {baseline} time in the outcome")
    return math.log(outcome.baselines[baseline] / outcome.seconds)
