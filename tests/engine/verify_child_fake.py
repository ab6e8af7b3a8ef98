"""A stand-in for engine.verify.gpu_checks in CPU tests of warm verifiers
(engine.verify.verifier.WarmVerifier), run by engine.isolation.forkserver: the same command line
(``SPEC VERDICT [--wait FIFO]``), the real wait for "go", and a verdict that says which library it
got, in which process, and when it was forked and told to go. A library whose path contains "hang"
never answers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from engine.verify.gpu_checks import wait_for_go


def main(argv: list[str]) -> int:
    spec_path, verdict_path = Path(argv[0]), Path(argv[1])
    forked_at = time.time()
    if argv[2:3] == ["--wait"] and not wait_for_go(Path(argv[3])):
        return 0
    went_at = time.time()
    spec = json.loads(spec_path.read_text())
    if "hang" in spec["library"]:
        time.sleep(600)
    verdict = {
        "ok": True,
        "reason": "ok",
        "message": spec["library"],
        "startup_s": {"forked_at": forked_at, "went_at": went_at, "pid": os.getpid()},
    }
    verdict_path.write_text(json.dumps(verdict))
    return 0
