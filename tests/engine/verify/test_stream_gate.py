"""The verifier's stream gate (engine.verify.gpu_checks.StreamGate) without a GPU: what it enqueues,
when it opens, and its watchdog. On the GPU, the busy-stream trials and the stream cheats run
through it in tests/engine/verify/test_gpu_harness.py and test_gpu_cheats.py."""

from __future__ import annotations

import time

import pytest
import torch

from engine.gpu import cuda_driver
from engine.verify.gpu_checks import StreamGate, new_gate


class RecordingDriver:
    def __init__(self, fail: bool = False) -> None:
        self.waits: list[tuple[int, int, int]] = []
        self.fail = fail

    def stream_wait_value32(self, stream: int, address: int, value: int) -> None:
        if self.fail:
            raise cuda_driver.DriverError("cuStreamWaitValue32_v2 failed: operation not supported")
        self.waits.append((stream, address, value))


class Stream:
    cuda_stream = 1234


def gate(driver: RecordingDriver) -> StreamGate:
    return StreamGate(driver, counter=torch.zeros(1, dtype=torch.int32))  # type: ignore[arg-type]


def test_each_hold_waits_for_the_next_value_and_a_release_writes_it():
    driver = RecordingDriver()
    g = gate(driver)
    for expected in (1, 2):
        g.hold(Stream())
        assert driver.waits[-1] == (1234, g.counter.data_ptr(), expected)
        assert int(g.counter[0]) == expected - 1  # held: the stream waits
        g.release()
        assert int(g.counter[0]) == expected  # open
    assert g.forced == 0


def test_a_release_without_a_hold_changes_nothing():
    g = gate(RecordingDriver())
    g.release()
    assert int(g.counter[0]) == 0


def test_the_watchdog_opens_a_hold_the_host_never_released():
    g = gate(RecordingDriver())
    g.limit_s = 0.1
    g.hold(Stream())
    deadline = time.monotonic() + 5
    while int(g.counter[0]) != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert int(g.counter[0]) == 1
    assert g.forced == 1


def test_a_failed_hold_raises_so_the_session_can_fall_back_to_the_sleep():
    g = gate(RecordingDriver(fail=True))
    with pytest.raises(cuda_driver.DriverError):
        g.hold(Stream())
    assert g.generation == 0
    assert g.held_since is None


def test_the_sleep_is_chosen_by_setting(monkeypatch):
    monkeypatch.setenv("ENGINE_VERIFY_BUSY_STREAM", "sleep")
    assert new_gate() == (None, "sleep")
