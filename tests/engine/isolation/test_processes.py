"""engine.isolation.processes.run: failures and timeouts come back as data, a timeout ends the
child's whole process group, and output is truncated."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from engine.isolation.processes import OUTPUT_LIMIT, ProcessResult, run, truncate


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie awaiting its reaper)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        text = stat.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return text.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_until_gone(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def read_pid(path: Path) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"no pid in {path}")


def test_it_returns_data_for_a_failing_command():
    result = run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert isinstance(result, ProcessResult)
    assert result.returncode == 3
    assert not result.ok
    assert not result.timed_out
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert result.seconds >= 0


def test_a_successful_command_is_ok():
    result = run([sys.executable, "-c", "print('hi')"], timeout=30)
    assert result.ok
    assert (result.returncode, result.stdout) == (0, "hi\n")


def test_a_command_killed_by_a_signal_has_a_negative_status():
    result = run(["sh", "-c", "kill -9 $$"], timeout=10)
    assert result.returncode == -9
    assert not result.ok
    assert not result.timed_out


def test_the_command_is_kept_shell_quoted_and_paths_are_accepted(tmp_path):
    result = run(["echo", "a b", tmp_path], timeout=10)
    assert result.command == f"echo 'a b' {tmp_path}"
    assert result.stdout == f"a b {tmp_path}\n"


def test_it_passes_stdin_cwd_and_env(tmp_path):
    result = run(
        ["sh", "-c", 'cat; pwd; echo "$GF_TEST_VALUE"'],
        timeout=10,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "GF_TEST_VALUE": "set"},
        stdin="from stdin\n",
    )
    assert result.stdout.splitlines() == ["from stdin", str(tmp_path.resolve()), "set"]


def test_a_timeout_kills_the_child_and_the_grandchild_it_started(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    result = run(
        ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"],
        timeout=0.5,
    )
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.returncode is None
    assert not result.ok
    assert "started" in result.stdout
    assert elapsed < 10
    assert wait_until_gone(read_pid(pidfile))


def test_an_interrupted_wait_kills_the_child_and_its_group(tmp_path):
    """A campaign stopped by Ctrl-C (or timeout -s INT) leaves no child on the GPU."""
    import signal
    import threading

    pidfile = tmp_path / "grandchild.pid"
    # Ctrl-C's own handler, whatever an earlier test in this process may have left installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(
            1.0, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        ).start()
        with pytest.raises(KeyboardInterrupt):
            run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert wait_until_gone(read_pid(pidfile))


def test_a_timeout_kills_a_grandchild_in_a_detached_subshell(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    result = run(
        ["sh", "-c", f"(sleep 60 > /dev/null 2>&1 & echo $! > {pidfile}); sleep 60"],
        timeout=0.5,
    )
    assert result.timed_out
    assert wait_until_gone(read_pid(pidfile))


def test_a_timeout_also_kills_a_grandchild_that_ignores_sigterm(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    result = run(
        ["sh", "-c", f"(trap '' TERM; exec sleep 4) & echo $! > {pidfile}; wait"],
        timeout=0.3,
    )
    elapsed = time.monotonic() - started
    assert result.timed_out
    # SIGTERM, a 2 s grace period, then SIGKILL: well before the grandchild's 4 s are up
    assert elapsed < 3.5
    assert wait_until_gone(read_pid(pidfile), seconds=0.5)


def test_output_over_the_limit_is_truncated_in_the_middle():
    size = OUTPUT_LIMIT * 2
    script = f"import sys; sys.stdout.write('A' * {size // 2} + 'B' * {size // 2})"
    result = run([sys.executable, "-c", script], timeout=30)
    assert result.ok
    assert len(result.stdout) < OUTPUT_LIMIT + 100
    assert result.stdout.startswith("A" * (OUTPUT_LIMIT // 2))
    assert result.stdout.endswith("B" * (OUTPUT_LIMIT // 2))
    assert f"[{size - OUTPUT_LIMIT} characters cut]" in result.stdout


def test_truncate_leaves_short_text_alone():
    assert truncate(None) == ""
    assert truncate("") == ""
    assert truncate("x" * OUTPUT_LIMIT) == "x" * OUTPUT_LIMIT


def test_truncate_keeps_the_head_and_tail():
    text = "head" + "-" * 100 + "tail"
    cut = truncate(text, limit=20)
    assert cut.startswith("head" + "-" * 6)
    assert cut.endswith("-" * 6 + "tail")
    assert f"[{len(text) - 20} characters cut]" in cut


def test_undecodable_output_is_replaced_not_raised():
    result = run(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe')"], timeout=30
    )
    assert result.ok
    assert result.stdout.startswith("ok")
    assert "\ufffd" in result.stdout


def reaped(pid: int, seconds: float) -> bool:
    """True once ``pid`` is gone and waited for (no zombie left)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def done_then(tmp_path: Path, linger: float) -> tuple[list[str], Path, Path]:
    """A child that writes its pid, then its result file, then lingers ``linger`` seconds."""
    pid_file, result = tmp_path / "pid", tmp_path / "result"
    code = (
        "import os, sys, time; from pathlib import Path\n"
        f"Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        f"Path({str(result)!r}).write_text('done')\n"
        f"time.sleep({linger})\n"
    )
    return [sys.executable, "-c", code], pid_file, result


def test_a_child_whose_work_is_done_is_returned_before_it_exits_and_reaped_after(tmp_path):
    argv, pid_file, result = done_then(tmp_path, linger=2.0)
    started = time.monotonic()
    ran = run(argv, timeout=30, done=result.exists)
    assert time.monotonic() - started < 1.5
    assert ran.early
    assert ran.ok
    assert ran.returncode is None  # not known yet
    assert reaped(read_pid(pid_file), seconds=10)


def test_a_done_child_that_does_not_exit_is_killed_after_the_grace(tmp_path, monkeypatch):
    from engine.isolation import processes

    monkeypatch.setattr(processes, "EXIT_GRACE_SECONDS", 0.3)
    argv, pid_file, result = done_then(tmp_path, linger=60)
    ran = run(argv, timeout=30, done=result.exists)
    assert ran.early
    assert reaped(read_pid(pid_file), seconds=10)


def test_a_child_that_never_says_done_is_waited_for_and_timed_out_as_before(tmp_path):
    argv, _, _ = done_then(tmp_path, linger=0.1)
    ran = run(argv, timeout=30, done=lambda: False)
    assert (ran.ok, ran.early, ran.returncode) == (True, False, 0)
    ran = run(
        [sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, done=lambda: False
    )
    assert ran.timed_out
    assert not ran.early


# --- stop_children: a cancelled campaign, a worker shutting down --------------------------------


@pytest.fixture
def stoppable():
    from engine.isolation import processes

    processes.allow_children()
    yield processes
    processes.allow_children()


def run_in_thread(**kwargs):
    import threading

    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", run(**kwargs)))
    thread.start()
    return thread, box


def test_stop_children_kills_a_waited_for_group_within_seconds(tmp_path, stoppable):
    pidfile = tmp_path / "grandchild.pid"
    # nvcc's shape: a driver that started a compiler which ignores SIGTERM
    argv = ["sh", "-c", f"(trap '' TERM; exec sleep 60) & echo $! > {pidfile}; wait"]
    thread, box = run_in_thread(argv=argv, timeout=300)
    grandchild = read_pid(pidfile)
    started = time.monotonic()
    assert stoppable.stop_children("campaign 7 cancelled") == 1
    thread.join(10)
    assert time.monotonic() - started < 3
    result = box["result"]
    assert (result.killed_for, result.returncode, result.ok) == ("stopped", None, False)
    assert not result.timed_out
    assert wait_until_gone(grandchild, seconds=1)


def test_after_a_stop_nothing_new_starts_until_children_are_allowed(tmp_path, stoppable):
    marker = tmp_path / "ran"
    stoppable.stop_children("worker shutting down")
    result = run(["touch", str(marker)], timeout=10)
    assert result.killed_for == "stopped"
    assert "worker shutting down" in result.stderr
    assert not marker.exists()
    stoppable.allow_children()
    assert run(["touch", str(marker)], timeout=10).ok
    assert marker.exists()


def test_a_started_child_given_its_input_after_a_stop_is_ended(stoppable):
    running = stoppable.start(["cat"])
    stoppable.stop_children("cancelled")
    result = running.finish(stdin="x", timeout=10)
    assert result.killed_for == "stopped"
    assert not running.alive()


def test_a_child_that_ends_by_itself_is_not_reported_stopped(stoppable):
    result = run([sys.executable, "-c", "print('hi')"], timeout=30)
    assert result.ok
    assert result.killed_for is None
    assert stoppable.stop_children("nothing running") == 0
