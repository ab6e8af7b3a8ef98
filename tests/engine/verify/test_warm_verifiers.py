"""Warm verifiers (engine.verify.verifier.WarmPool, ENGINE_VERIFY_WARM): verification children
forked before their candidates are known, each still verifying exactly one library. Without a GPU
the child is tests/engine/verify_child_fake.py, which speaks the real child's protocol; the real
child runs in tests/engine/verify/test_gpu_warm_verifiers.py."""

from __future__ import annotations

import json
import os
import threading
import time
import unittest.mock
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.isolation.forkserver import ForkServer
from engine.problem import Problem
from engine.verify import verifier as verify_module
from engine.verify.gpu_checks import wait_for_go
from engine.verify.verifier import Verifications, WarmPool, WarmVerifier
from tests.engine.process_fakes import alive

PROBLEM = Problem(64, 64, 64)


@pytest.fixture
def server(monkeypatch) -> Iterator[ForkServer]:
    monkeypatch.setattr(verify_module, "CHILD_MODULE", "tests.engine.verify_child_fake")
    started, folder = verify_module.new_fork_server(start=True)
    first = WarmVerifier(started)
    first.pid()  # forked once the server has imported its module
    first.discard()
    yield started
    started.close()
    folder.cleanup()


def test_a_warm_verifier_is_forked_before_its_library_is_known(server, tmp_path):
    warm = WarmVerifier(server)
    time.sleep(1.0)
    handed_at = time.time()
    result = warm.verify(tmp_path / "lib.so", PROBLEM, timeout=60)
    assert result.ok, result
    assert result.message == str((tmp_path / "lib.so").resolve())
    assert result.startup_s["forked_at"] < handed_at <= result.startup_s["went_at"]


def test_a_warm_verifier_verifies_one_library_only(server, tmp_path):
    warm = WarmVerifier(server)
    assert warm.verify(tmp_path / "a.so", PROBLEM, timeout=60).ok
    with pytest.raises(RuntimeError, match="one library"):
        warm.verify(tmp_path / "b.so", PROBLEM, timeout=60)


@pytest.mark.slow
def test_its_time_limit_counts_from_its_library_not_from_its_fork(server, tmp_path):
    warm = WarmVerifier(server)
    time.sleep(2.5)
    assert warm.verify(tmp_path / "lib.so", PROBLEM, timeout=2).ok


def test_a_warm_verifier_that_hangs_times_out(server, tmp_path):
    result = WarmVerifier(server).verify(tmp_path / "hang.so", PROBLEM, timeout=1)
    assert not result.ok
    assert result.reason == "timeout"


def test_each_candidate_of_a_batch_gets_a_warm_verifier_of_its_own(server, tmp_path):
    libraries = [tmp_path / f"lib{i}.so" for i in range(3)]
    pool = WarmPool(server, 3)
    batch = Verifications(libraries, PROBLEM, jobs=3, fork_server=server, warm=pool)
    verdicts = batch.results()
    assert [v.message for v in verdicts] == [str(p.resolve()) for p in libraries]
    assert len({v.startup_s["pid"] for v in verdicts}) == 3
    assert all(v.startup_s["forked_at"] < v.startup_s["went_at"] for v in verdicts)
    assert batch.warm_used == 3


def test_a_batch_larger_than_its_pool_forks_the_rest_when_they_are_known(server, tmp_path):
    libraries = [tmp_path / f"lib{i}.so" for i in range(4)]
    batch = Verifications(libraries, PROBLEM, jobs=2, fork_server=server, warm=WarmPool(server, 1))
    verdicts = batch.results()
    assert all(v.ok for v in verdicts)
    assert batch.warm_used == 1
    assert len({v.startup_s["pid"] for v in verdicts}) == 4  # never two libraries in one child
    assert sum("went_at" in v.startup_s and "forked_at" in v.startup_s for v in verdicts) == 4


def test_the_warm_verifiers_nobody_took_end_with_the_batch(server, tmp_path):
    pool = WarmPool(server, 3)
    pids = pool.pids()
    assert len(pids) == 3
    assert all(alive(pid) for pid in pids)
    Verifications([tmp_path / "lib.so"], PROBLEM, fork_server=server, warm=pool).results()
    assert len(pool) == 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)  # the one taken exited; the others were ended


def test_a_batch_takes_its_pools_mps_choice(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_VERIFY_MPS_PIPE", "/nonexistent/mps")
    pool = WarmPool(server, 2, mps_pipe=None)
    batch = Verifications(
        [tmp_path / "a.so", tmp_path / "b.so"], PROBLEM, fork_server=server, warm=pool
    )
    assert batch.mps_pipe is None
    batch.results()


def test_a_pool_on_a_dead_fork_server_is_empty(server):
    server.close()
    assert len(WarmPool(server, 4)) == 0


def test_the_child_goes_on_go_and_ends_unused_at_the_end_of_input(tmp_path):
    go = tmp_path / "go"
    os.mkfifo(go)
    writer = os.open(go, os.O_RDWR)
    os.write(writer, b"go\n")
    assert wait_for_go(go)
    os.close(writer)
    writer = os.open(go, os.O_RDWR)
    threading.Timer(0.2, os.close, (writer,)).start()
    assert wait_for_go(go) is False


def test_a_warm_verifiers_spec_is_written_when_its_library_is_known(server, tmp_path):
    warm = WarmVerifier(server)
    assert not warm.spec_path.exists()
    spec_path = warm.spec_path
    seen = {}
    real = verify_module.write_spec

    def spy(path, library, problem):
        real(path, library, problem)
        seen.update(json.loads(Path(path).read_text()))

    with unittest.mock.patch.object(verify_module, "write_spec", spy):
        warm.verify(tmp_path / "lib.so", Problem(128, 64, 32), timeout=60)
    assert (seen["m"], seen["n"], seen["k"]) == (128, 64, 32)
    assert not spec_path.exists()  # its folder is gone with it


def test_the_real_child_waits_then_fails_as_a_fresh_one_does_without_a_gpu(tmp_path):
    """engine.verify.gpu_checks itself with --wait: on this machine (no CUDA) its warm-up fails
    quietly, it waits for its library, then fails where a fresh child fails."""
    server, folder = verify_module.new_fork_server(start=True)
    try:
        fresh = verify_module.verify(tmp_path / "lib.so", PROBLEM, timeout=120, fork_server=server)
        warm = WarmVerifier(server)
        warm.pid()
        time.sleep(1.0)
        assert alive(warm.pid())  # waiting for its library, not failed at its warm-up
        warmed = warm.verify(tmp_path / "lib.so", PROBLEM, timeout=120)
    finally:
        server.close()
        folder.cleanup()
    assert (warmed.ok, warmed.reason) == (fresh.ok, fresh.reason)
    assert not warmed.ok
    assert warmed.stderr_tail.strip().splitlines()[-1] == fresh.stderr_tail.strip().splitlines()[-1]


@pytest.mark.parametrize("setting", ["on", "kernels"])
def test_the_child_runs_the_checks_kernels_before_its_library_only_when_asked(
    setting, tmp_path, monkeypatch
):
    from engine.verify import gpu_checks

    monkeypatch.setenv("ENGINE_VERIFY_WARM", setting)
    asked = []
    monkeypatch.setattr(gpu_checks, "warm_up_context", lambda *, kernels: asked.append(kernels))
    go = tmp_path / "go"
    os.mkfifo(go)
    writer = os.open(go, os.O_RDWR)
    threading.Timer(0.2, os.close, (writer,)).start()  # not needed after all: end of input
    argv = [str(tmp_path / "spec.json"), str(tmp_path / "verdict.json"), "--wait", str(go)]
    assert gpu_checks.main(argv) == 0
    assert asked == [setting == "kernels"]
    assert not (tmp_path / "verdict.json").exists()


def test_the_kernel_warm_up_runs_the_checks_operations_on_a_tiny_problem():
    from torch.utils._python_dispatch import TorchDispatchMode

    from engine.verify import gpu_checks

    class Seen(TorchDispatchMode):
        ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        gpu_checks.warm_up_kernels("cpu")  # the same operations as on the GPU, on this CPU
    fills = {"normal_", "uniform_", "random_", "fill_"}
    assert fills | {"mm", "clone", "equal", "linalg_vector_norm"} <= seen.ops, sorted(seen.ops)


def test_a_pool_for_this_process_takes_its_mps_daemon(server, monkeypatch):
    monkeypatch.setenv("ENGINE_VERIFY_MPS_PIPE", "/run/mps/pipe")
    pool = WarmPool.for_this_process(server, 1)
    assert pool.mps_pipe == "/run/mps/pipe"
    pool.close()
    monkeypatch.delenv("ENGINE_VERIFY_MPS_PIPE")
    assert WarmPool.for_this_process(server, 0).mps_pipe is None
