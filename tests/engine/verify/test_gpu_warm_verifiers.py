"""Warm verifiers on a real GPU (ENGINE_VERIFY_WARM, engine.verify.verifier.WarmPool): the real
child creates its context before its candidate is known, then gives the same verdicts as a child
forked for its candidate, in the candidate sandbox. Skipped without a GPU."""

from __future__ import annotations

import time

import pytest

from engine.problem import Problem
from engine.verify import harness_kernels
from engine.verify import verifier as verify_module
from engine.verify.verifier import Verifications, WarmPool

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = Problem(1024, 1024, 1024)
CHEATS = ("fp16_accumulation.cu", "other_stream.cu", "out_of_bounds_write.cu")


@pytest.mark.parametrize("setting", ["on", "kernels"])
def test_warm_verifiers_pass_honest_kernels_and_reject_cheats(
    setting, verifier_sandboxes, monkeypatch
):
    monkeypatch.setenv("ENGINE_VERIFY_WARM", setting)  # read by the children
    reference = harness_kernels.build_one(harness_kernels.REFERENCE, SHAPE.layout)
    assert reference.ok, reference.log
    cheats = [p for p in harness_kernels.bad_kernel_paths() if p.name in CHEATS]
    built = [harness_kernels.build_one(path, SHAPE.layout) for path in cheats]
    assert all(b.ok for b in built), [b.log for b in built if not b.ok]
    server, folder = verify_module.new_fork_server(start=True)
    try:
        pool = WarmPool(server, 5)
        pool.pids()  # every child forked
        time.sleep(3.0)  # their contexts exist by now, as after the batch before's timing
        libraries = [reference.library, *(b.library for b in built), reference.library]
        batch = Verifications(libraries, SHAPE, jobs=5, fork_server=server, warm=pool)
        verdicts = batch.results()
    finally:
        server.close()
        folder.cleanup()
    verifier_sandboxes.assert_all_sandboxed()
    expected = ["ok", *(harness_kernels.expected_reason(p) for p in cheats), "ok"]
    assert [v.reason for v in verdicts] == expected, [v.message for v in verdicts]
    assert batch.warm_used == 5
    for verdict in (verdicts[0], verdicts[-1]):
        assert {"warm", "waited"} <= set(verdict.startup_s), verdict.startup_s
        assert verdict.startup_s["waited"] > 1.0
        # the context came before the candidate: the session only adds a stream to it
        assert verdict.phases_s["session_context"] < verdict.startup_s["warm"], verdict
