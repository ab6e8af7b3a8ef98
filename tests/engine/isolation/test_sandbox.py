"""engine.isolation.sandbox through engine.isolation.processes.run: candidate children get an
allow-listed environment, limits (memory, CPU time, file size, no core dumps) and, where the OS
allows, no network; what was applied is in the result, and a limit that stops a child is data."""

from __future__ import annotations

import os
import resource
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.isolation import processes, sandbox
from engine.isolation.processes import run
from engine.isolation.sandbox import Limits, Policy

MIB = 1 << 20


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return sandbox.private_home(tmp_path)


def python(
    code: str, *, policy: Policy | None, env: dict[str, str] | None = None, timeout: float = 60
) -> processes.ProcessResult:
    return run([sys.executable, "-c", code], timeout=timeout, env=env, policy=policy)


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A TCP port on this host's loopback that accepts connections (into its backlog)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def connect_script(port: int) -> str:
    return (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('no connection:', exc)\n"
    )


# ---- environment -------------------------------------------------------------------------


def test_candidate_env_drops_secrets(tmp_path):
    source = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "PYTHONPATH": "/src",
        "CUDA_VISIBLE_DEVICES": "3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVCC_CCBIN": "/usr/bin/g++-12",
        "ENGINE_NVCC": "/usr/local/cuda/bin/nvcc",
        "ENGINE_CUBLAS_HOME": "/opt/cublas",
        # never passed
        "HOME": "/root",
        "TMPDIR": "/var/tmp",
        "XDG_CACHE_HOME": "/root/.cache",
        "SECRET_KEY": "django",
        "DATABASE_URL": "postgres://u:p@db/gf",
        "REDIS_URL": "redis://:p@redis:6379/0",
        "OPENAI_API_KEY": "sk-1",
        "GEMMFORGE_LLM_API_KEY": "sk-2",
        "GITHUB_TOKEN": "ghp",
        "HF_TOKEN": "hf",
        "DB_PASSWORD": "p",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "eu-west-1",
        "ENGINE_LLM_TOKEN": "t",
        "CUDA_AUTH_COOKIE": "c",
        "ENGINE_DATABASE_URL": "postgres://u:p@db/gf",
        "LD_PRELOAD": "/tmp/evil.so",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    env = sandbox.candidate_env(tmp_path / "home", cache_dir=tmp_path / "cache", source=source)
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "PYTHONPATH": "/src",
        "CUDA_VISIBLE_DEVICES": "3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVCC_CCBIN": "/usr/bin/g++-12",
        "ENGINE_NVCC": "/usr/local/cuda/bin/nvcc",
        "ENGINE_CUBLAS_HOME": "/opt/cublas",
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "home"),
        "ENGINE_CACHE_DIR": str(tmp_path / "cache"),
    }


def test_a_child_sees_only_the_candidate_environment(home, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    monkeypatch.setenv("GF_UNLISTED", "x")
    result = python(
        "import os; print(sorted(os.environ)); print(os.environ['HOME'])",
        policy=sandbox.gpu_policy(),
        env=sandbox.candidate_env(home),
    )
    assert result.ok, result.stderr
    names, child_home = result.stdout.splitlines()
    assert "SECRET_KEY" not in names
    assert "GF_UNLISTED" not in names
    assert child_home == str(home)
    assert list(home.iterdir()) == []


def test_the_private_home_is_empty_and_only_ours(tmp_path):
    home = sandbox.private_home(tmp_path)
    assert list(home.iterdir()) == []
    assert home.stat().st_mode & 0o777 == 0o700


# ---- limits ------------------------------------------------------------------------------


def test_nvcc_children_get_an_address_space_cpu_and_file_size_limit_and_no_core_dumps():
    config = EngineConfig(nvcc_memory_gb=8, nvcc_cpu_seconds=120, child_file_size_mb=256)
    result = python(
        "import resource as r\n"
        "for kind in (r.RLIMIT_AS, r.RLIMIT_CPU, r.RLIMIT_FSIZE, r.RLIMIT_CORE):\n"
        "    print(r.getrlimit(kind)[0])\n",
        policy=sandbox.nvcc_policy(config),
    )
    assert result.ok, result.stderr
    assert result.stdout.split() == [str(8 << 30), "120", str(256 * MIB), "0"]
    assert result.sandbox is not None
    assert result.sandbox.limits.address_space_bytes == 8 << 30


def test_gpu_children_get_no_address_space_limit_but_a_watched_resident_limit():
    policy = sandbox.gpu_policy(EngineConfig(child_memory_gb=4))
    assert policy.limits.address_space_bytes is None
    assert policy.limits.resident_bytes == 4 << 30
    assert not policy.user_namespace
    result = python(
        "import resource as r; print(r.getrlimit(r.RLIMIT_AS)[0], r.getrlimit(r.RLIMIT_CORE)[0])",
        policy=policy,
    )
    assert result.ok, result.stderr
    inherited = resource.getrlimit(resource.RLIMIT_AS)[0]  # RLIM_INFINITY where none is set
    assert result.stdout.split() == [str(inherited), "0"]


def test_a_child_over_its_memory_limit_is_killed_and_reported():
    policy = Policy(Limits(resident_bytes=64 * MIB))
    result = python(
        "import time\nheld = b'x' * (256 << 20)\nprint('allocated', flush=True)\ntime.sleep(60)",
        policy=policy,
    )
    assert result.killed_for == "memory"
    assert result.returncode is None
    assert not result.timed_out
    assert not result.ok
    assert result.seconds < 30


def test_the_memory_of_grandchildren_counts_toward_the_limit():
    grandchild = "import time; held = b'x' * (256 << 20); time.sleep(60)"
    result = run(
        ["sh", "-c", f'"{sys.executable}" -c "{grandchild}" & wait'],
        timeout=60,
        policy=Policy(Limits(resident_bytes=64 * MIB)),
    )
    assert result.killed_for == "memory"
    assert result.seconds < 30


def test_a_child_under_its_memory_limit_is_left_alone():
    result = python(
        "import time; held = b'x' * (8 << 20); time.sleep(1.2); print('done')",
        policy=Policy(Limits(resident_bytes=512 * MIB)),
    )
    assert result.ok, result.stderr
    assert result.killed_for is None
    assert result.stdout == "done\n"


def test_a_child_writing_a_huge_file_is_stopped(tmp_path):
    target = tmp_path / "huge.bin"
    result = run(
        ["sh", "-c", f"exec head -c {64 * MIB} /dev/zero > {target}"],
        timeout=60,
        policy=Policy(Limits(file_size_bytes=4 * MIB)),
    )
    assert not result.ok
    assert result.killed_for == "file_size"
    assert target.stat().st_size <= 4 * MIB


def test_a_python_child_cannot_write_past_the_file_size_limit(tmp_path):
    """Python ignores SIGXFSZ, so it gets EFBIG instead of the signal: stopped all the same."""
    target = tmp_path / "huge.bin"
    result = python(
        f"with open({str(target)!r}, 'wb') as f:\n"
        "    for _ in range(64):\n"
        "        f.write(b'x' * (1 << 20))\n",
        policy=Policy(Limits(file_size_bytes=4 * MIB)),
    )
    assert not result.ok
    assert "File too large" in result.stderr
    assert target.stat().st_size <= 4 * MIB


def test_a_child_over_its_cpu_time_is_stopped():
    result = python("while True: pass", policy=Policy(Limits(cpu_seconds=1)), timeout=120)
    assert not result.ok
    assert result.killed_for == "cpu_time"
    assert not result.timed_out


def test_a_timeout_is_reported_as_the_reason_it_was_killed():
    result = python("import time; time.sleep(30)", policy=sandbox.gpu_policy(), timeout=0.5)
    assert result.timed_out
    assert result.killed_for == "timeout"
    assert result.returncode is None


def test_input_reaches_a_child_whose_memory_is_watched(monkeypatch):
    monkeypatch.setattr(processes, "MEMORY_POLL_SECONDS", 0.05)
    result = run(
        ["sh", "-c", "sleep 0.3; cat"],
        timeout=30,
        stdin="from stdin\n",
        policy=Policy(Limits(resident_bytes=512 * MIB)),
    )
    assert result.ok, result.stderr
    assert result.stdout == "from stdin\n"


# ---- network -----------------------------------------------------------------------------


def test_nvcc_child_has_no_network_where_the_os_allows(listening_port):
    result = python(connect_script(listening_port), policy=sandbox.nvcc_policy(EngineConfig()))
    assert result.ok, result.stderr
    assert result.sandbox is not None
    if not result.sandbox.network_isolated:
        pytest.skip(f"this OS allows no network namespace here ({result.sandbox.network})")
    assert result.stdout.startswith("no connection"), result.stdout
    control = python(
        connect_script(listening_port),
        policy=sandbox.nvcc_policy(EngineConfig(sandbox_network="off")),
    )
    assert control.stdout == "connected\n", control.stdout + control.stderr


def test_gpu_children_stay_in_the_callers_user_namespace(listening_port):
    """A user namespace could cost a GPU child /dev/nvidia*: only a plain network namespace."""
    result = python(
        "import os; print(os.readlink('/proc/self/ns/user')); print(os.getuid())\n"
        + connect_script(listening_port),
        policy=sandbox.gpu_policy(),
    )
    assert result.ok, result.stderr
    user_ns, uid, connection = result.stdout.splitlines()
    assert user_ns == os.readlink("/proc/self/ns/user")
    assert int(uid) == os.getuid()
    assert result.sandbox is not None
    if result.sandbox.network_isolated:
        assert result.sandbox.network == sandbox.ISOLATED
        assert connection.startswith("no connection")


def test_an_isolated_child_still_has_its_own_loopback():
    result = python(
        "import socket\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "socket.create_connection(server.getsockname(), timeout=5).close()\n"
        "print('loopback works')\n",
        policy=sandbox.gpu_policy(),
    )
    assert result.ok, result.stderr
    assert result.stdout == "loopback works\n"
    assert "no loopback" not in result.sandbox.network


def test_network_isolation_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("ENGINE_SANDBOX_NETWORK", "off")
    result = python(
        "import os; print(os.readlink('/proc/self/ns/net'))", policy=sandbox.gpu_policy()
    )
    assert result.ok, result.stderr
    assert result.stdout.strip() == os.readlink("/proc/self/ns/net")
    assert result.sandbox is not None
    assert result.sandbox.network == sandbox.NETWORK_OFF
    assert not result.sandbox.network_isolated


def test_an_unknown_network_setting_is_refused(monkeypatch):
    monkeypatch.setenv("ENGINE_SANDBOX_NETWORK", "maybe")
    with pytest.raises(ValueError, match="ENGINE_SANDBOX_NETWORK"):
        EngineConfig()


def test_a_failed_namespace_setup_runs_the_child_without_isolation(monkeypatch):
    real_setup = sandbox.child_setup

    def failing_setup(policy: Policy, report_fd: int):
        if policy.network == "auto":

            def fail() -> None:
                raise sandbox.NamespaceSetupFailed("cannot write uid_map")

            return fail
        return real_setup(policy, report_fd)

    monkeypatch.setattr(sandbox, "child_setup", failing_setup)
    result = python("print('ran')", policy=sandbox.nvcc_policy(EngineConfig()))
    assert result.ok, result.stderr
    assert result.stdout == "ran\n"
    assert result.sandbox is not None
    assert not result.sandbox.network_isolated
    assert result.sandbox.network.startswith("unavailable")


# ---- what was applied --------------------------------------------------------------------


def test_a_run_without_a_policy_records_no_sandbox():
    result = python("print(1)", policy=None)
    assert result.ok
    assert result.sandbox is None
    assert result.killed_for is None


def test_the_applied_sandbox_describes_itself():
    applied = sandbox.Applied(
        Limits(address_space_bytes=16 << 30, cpu_seconds=600, file_size_bytes=512 * MIB),
        sandbox.ISOLATED,
    )
    assert applied.network_isolated
    assert applied.describe() == (
        "network isolated; address space 16 GiB, cpu 600 s, file size 512 MiB, no core dumps"
    )


def test_group_resident_memory_counts_this_process_group():
    leader = os.getpgrp()
    assert sandbox.group_resident_bytes(leader) > 0
    assert sandbox.group_resident_bytes(2**22 + 12345) == 0  # no such group


def test_no_pipe_is_left_open_after_many_runs():
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        python("pass", policy=sandbox.gpu_policy())
    assert len(os.listdir("/proc/self/fd")) <= before


# ---- on a GPU ----------------------------------------------------------------------------


@pytest.mark.gpu
def test_a_gpu_child_in_its_sandbox_still_runs_cuda(home):
    """The network namespace, the limits and the allow-listed environment leave CUDA working."""
    result = python(
        "import torch\n"
        "a = torch.ones(256, 256, device='cuda', dtype=torch.float16)\n"
        "print(float((a @ a).float().mean()))\n",
        policy=sandbox.gpu_policy(),
        env=sandbox.candidate_env(home),
        timeout=300,
    )
    assert result.ok, result.stderr
    assert result.stdout == "256.0\n"
    assert result.sandbox is not None
    if not result.sandbox.network_isolated:
        pytest.skip(f"CUDA works, but no network namespace here ({result.sandbox.network})")
    assert result.sandbox.network == sandbox.ISOLATED
