"""Running code against an unpacked bundle in a fresh Python process, as a user's script would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_in_bundle(code: str, root: Path) -> str:
    """``code`` after importing torch, the bundle and its ops, with ``root`` on the path; its
    stdout (the process must succeed)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, gemmforge_bundle\nfrom gemmforge_bundle import _ops\n" + code,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
