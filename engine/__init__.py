"""gemmforge engine: a library (no Django) that proposes, compiles, verifies and times kernels."""

from engine.problem import Layout, Problem, ProblemError

__all__ = ["Layout", "Problem", "ProblemError"]
__version__ = "0.1.0"
