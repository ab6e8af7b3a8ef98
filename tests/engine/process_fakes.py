"""Stand-ins for engine.toolchain.run's result: a child process its sandbox stopped."""

from __future__ import annotations

from engine import sandbox, toolchain


def killed_for_memory(command: str, limits: sandbox.Limits) -> toolchain.ProcessResult:
    """What toolchain.run returns for a child the memory watchdog killed while allocating."""
    return toolchain.ProcessResult(
        command=command,
        returncode=None,
        stdout="",
        stderr="allocating",
        seconds=3.0,
        timed_out=False,
        killed_for="memory",
        sandbox=sandbox.Applied(limits, sandbox.ISOLATED),
    )
