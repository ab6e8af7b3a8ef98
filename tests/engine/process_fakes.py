"""Stand-ins for engine.isolation.processes.run's result (a child process its sandbox stopped) and
for the python a verification child runs with; whether a process is alive."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.isolation import processes, sandbox


def killed_for_memory(command: str, limits: sandbox.Limits) -> processes.ProcessResult:
    """What processes.run returns for a child the memory watchdog killed while allocating."""
    return processes.ProcessResult(
        command=command,
        returncode=None,
        stdout="",
        stderr="allocating",
        seconds=3.0,
        timed_out=False,
        killed_for="memory",
        sandbox=sandbox.Applied(limits, sandbox.ISOLATED),
    )


def environment_reporting_python(folder: Path) -> Path:
    """A stand-in for python (engine.verify.verifier's ``python``) whose verdict is ok and whose
    message is the environment it was given, as JSON."""
    path = folder / "python"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "verdict = {'ok': True, 'reason': 'ok', 'message': json.dumps(dict(os.environ))}\n"
        "open(sys.argv[4], 'w').write(json.dumps(verdict))\n"
    )
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
