"""A standby GPU step child on a real GPU: started before its step, in the step child's
sandbox, it imports torch and starts its verifications' fork server; then it gets its step on
stdin, and verifies (every candidate in a forked child) and times the batch. Skipped without a
GPU."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from engine.codegen import get_family
from engine.compilation.compile import compile_configs
from engine.gpu import cuda_driver
from engine.isolation import processes, sandbox
from engine.outcomes import CandidateStatus

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

PROBLEM = "1024x1024x1024_nn"
# two small sm80 configs of the curated library: quick to build, valid at 1024³
KNOBS = [
    {"layout": "nn", "tile_m": 64, "tile_n": 64, "tile_k": 32, "warp_m": 2, "warp_n": 2,
     "stages": 3, "swizzle": 1, "splits": 1},
    {"layout": "nn", "tile_m": 128, "tile_n": 128, "tile_k": 32, "warp_m": 2, "warp_n": 2,
     "stages": 3, "swizzle": 1, "splits": 1},
]  # fmt: skip


@pytest.mark.parametrize("warm", [False, True], ids=["forked", "warm"])
def test_a_standby_step_child_verifies_and_times_its_batch(tmp_path: Path, warm: bool):
    configs = [get_family("sm80").from_knobs(knobs) for knobs in KNOBS]
    built = compile_configs(configs, target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built]
    batch, out = tmp_path / "batch.json", tmp_path / "outcomes.json"
    batch.write_text(
        json.dumps([{"name": c.name, "family": c.FAMILY, "knobs": c.knobs()} for c in configs])
    )
    env = {**sandbox.engine_child_env(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    command = [sys.executable, "-m", "engine.execution.gpu_step", "--standby"]
    command += ["--executor", "local"]
    if warm:  # the step before is verified already: its mark exists
        env["ENGINE_VERIFY_WARM"] = "on"
        (tmp_path / "verified-before").touch()
        command += ["--warm-after", str(tmp_path / "verified-before"), "--warm-verifiers", "2"]
    child = processes.start(
        command,
        cwd=tmp_path,
        env=env,
        policy=sandbox.gpu_policy(),
    )
    time.sleep(10)  # it prepares meanwhile, as while the GPU runs the step before
    assert child.alive()
    step = ["--executor", "local", "--problem", PROBLEM, "--batch", str(batch),
            "--out", str(out), "--verify-jobs", "2", "--device-seconds", "1"]  # fmt: skip
    ran = child.finish(stdin=json.dumps(step) + "\n", timeout=300)
    assert ran.ok, ran.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [o["status"] for o in data["outcomes"]] == [CandidateStatus.OK, CandidateStatus.OK], (
        data["outcomes"]
    )
    info, phases = data["info"], data["phases_s"]
    assert info["verification_children"] == 2
    # forked by a fork server that had imported torch already: no interpreter start, no imports
    assert info["verification_start_s"][1] < 1.0, info
    assert phases.get("imports", 0.0) < 1.0, phases
    assert {"verification_session_s", "verification_checks_s"} <= set(info)
    assert info.get("verification_warm", 0) == (2 if warm else 0)
