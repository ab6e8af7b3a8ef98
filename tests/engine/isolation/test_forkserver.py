"""engine.isolation.forkserver: children forked from one server that imported their module first,
each in a session of its own, under the same sandbox and with the same result record as a child that
engine.isolation.processes.run starts fresh. The child is tests/engine/forkserver_child.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.isolation import sandbox
from engine.isolation.forkserver import ForkServer, ForkServerDied
from engine.isolation.sandbox import Limits, Policy
from tests.engine.process_fakes import alive

CHILD = "tests.engine.forkserver_child"
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    workdir = tmp_path / "server"
    workdir.mkdir()
    env = {**sandbox.engine_child_env(workdir), "PYTHONPATH": str(REPO_ROOT)}
    with ForkServer([CHILD], env=env, cwd=workdir) as started:
        yield started


def child_dir(tmp_path: Path, name: str = "child") -> Path:
    workdir = tmp_path / name
    workdir.mkdir()
    return workdir


def run(server: ForkServer, tmp_path: Path, *argv: str, policy: Policy | None = None, **kwargs):
    workdir = child_dir(tmp_path, f"child-{time.monotonic_ns()}")
    options = {"timeout": 60, "cwd": workdir, "env": {"CHILD_MARK": workdir.name}}
    options.update(kwargs)
    return server.run(CHILD, list(argv), policy=policy or sandbox.gpu_policy(), **options)


def test_a_child_is_forked_from_the_server_that_imported_its_module(server, tmp_path):
    first = json.loads(run(server, tmp_path, "report").stdout)
    second = json.loads(run(server, tmp_path, "report").stdout)
    assert first["loaded_in"] == second["loaded_in"]  # imported once, by the server
    assert first["loaded_in"] not in (first["pid"], second["pid"], os.getpid())


def test_a_child_runs_in_its_own_session_directory_and_environment(server, tmp_path):
    workdir = child_dir(tmp_path)
    env = {"HOME": str(workdir), "ONLY_THIS": "1"}
    result = run(server, tmp_path, "report", "x y", cwd=workdir, env=env)
    assert result.ok, result.stderr
    report = json.loads(result.stdout)
    assert report["sid"] == report["pid"] != os.getsid(0)
    assert report["cwd"] == str(workdir)
    assert report["env"] == env
    assert report["argv"] == [CHILD, "report", "x y"]


def test_a_child_gets_the_policys_limits_and_no_core_dumps(server, tmp_path):
    policy = Policy(Limits(file_size_bytes=8 << 20, resident_bytes=1 << 30), network="off")
    result = run(server, tmp_path, "report", policy=policy)
    report = json.loads(result.stdout)
    assert (report["core"], report["fsize"]) == (0, 8 << 20)
    assert result.sandbox is not None
    assert result.sandbox.limits == policy.limits
    assert result.sandbox.network == sandbox.NETWORK_OFF


def test_the_exit_status_and_both_outputs_come_back(server, tmp_path):
    result = run(server, tmp_path, "exit", "3")
    assert (result.returncode, result.timed_out, result.killed_for) == (3, False, None)
    assert result.stdout == "to stdout\n"
    assert result.stderr == "to stderr\n"
    assert not result.ok


def test_a_child_killed_by_a_signal_reports_the_signal(server, tmp_path):
    result = run(server, tmp_path, "segfault")
    assert result.returncode == -11


def test_a_child_over_its_time_is_killed_with_everything_it_started(server, tmp_path):
    result = run(server, tmp_path, "sleep_with_grandchild", timeout=2)
    assert (result.returncode, result.timed_out, result.killed_for) == (None, True, "timeout")
    grandchild = int(result.stdout.split()[0])
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)


def test_a_child_over_its_resident_memory_is_killed_and_reported(server, tmp_path):
    policy = Policy(Limits(resident_bytes=200 << 20), network="off")
    result = run(server, tmp_path, "allocate", "400", policy=policy, timeout=30)
    assert result.killed_for == "memory"
    assert result.returncode is None
    assert result.seconds < 20


def test_children_run_at_once_from_many_threads(server, tmp_path):
    results = []

    def one(i: int) -> None:
        results.append(run(server, tmp_path, "exit", str(i)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.returncode for r in results) == list(range(8))


def test_a_child_gets_the_same_network_as_a_fresh_one(server, tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = str(listener.getsockname()[1])
        result = run(server, tmp_path, "connect", port, policy=sandbox.gpu_policy())
        assert result.ok, result.stderr
        assert result.sandbox is not None
        if not result.sandbox.network_isolated:
            pytest.skip(f"this OS allows no network namespace here ({result.sandbox.network})")
        assert result.sandbox.network == sandbox.ISOLATED
        assert result.stdout.startswith("no connection"), result.stdout
        network_off = sandbox.gpu_policy(EngineConfig(sandbox_network="off"))
        control = run(server, tmp_path, "connect", port, policy=network_off)
        assert control.stdout == "connected\n", control.stdout + control.stderr


def test_closing_the_server_kills_its_running_children(server, tmp_path):
    results = []
    thread = threading.Thread(
        target=lambda: results.append(run(server, tmp_path, "sleep_with_grandchild"))
    )
    thread.start()
    time.sleep(1.5)
    server.close()
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert not results[0].ok
    with pytest.raises(ForkServerDied):
        run(server, tmp_path, "report")


def test_a_user_namespace_policy_is_refused(server, tmp_path):
    with pytest.raises(ValueError, match="user namespace"):
        run(server, tmp_path, "report", policy=sandbox.nvcc_policy(EngineConfig()))


def test_the_server_keeps_off_the_requesters_stderr_and_ignores_ctrl_c(server, tmp_path):
    """Holding our stderr, it would keep the pipe our parent reads open after we exit."""
    server.start()
    pid = server._proc.pid  # type: ignore[union-attr]
    assert os.readlink(f"/proc/{pid}/fd/2").endswith("forkserver.stderr")
    assert json.loads(run(server, tmp_path, "report").stdout)  # preloads done
    os.kill(pid, signal.SIGINT)  # as `timeout -s INT` sends to the whole group
    time.sleep(0.3)
    assert server.alive
    assert run(server, tmp_path, "exit", "0").returncode == 0
