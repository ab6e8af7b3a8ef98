"""The sandbox of every process that builds or loads candidate code.

- Environment: an allow-list (:func:`candidate_env`); HOME and TMPDIR are a private empty folder,
  and nothing that looks like a secret passes, even under an allowed prefix.
- Limits, set in the child before exec: no core dumps, a file-size limit, and for nvcc an
  address-space and a CPU-time limit. CUDA reserves huge virtual address ranges, so GPU children get
  no RLIMIT_AS; engine.isolation.processes.run watches their process group's resident memory
  instead.
- Network: a network namespace of its own (only loopback, which compute-sanitizer needs), where
  the OS allows; otherwise the child runs without one and its result says so.

engine.isolation.processes.run applies a :class:`Policy` and reports what it applied as
:class:`Applied`.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import resource
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.config import CACHE_DIR_VARIABLE, EngineConfig, SandboxNetwork
from engine.config import load as load_config

REPO_ROOT = Path(__file__).resolve().parents[2]  # engine/ lives here
GIB = 1 << 30
MIB = 1 << 20

PASSED_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
    }
)
# CUDA_/NVIDIA_: device selection and driver settings; NVCC_: nvcc's own settings (NVCC_CCBIN…);
# ENGINE_: the engine's configuration, which its children read again.
PASSED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NVCC_", "ENGINE_")
SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|_URL$|_DSN$|^AWS_",
    re.IGNORECASE,
)

# what the child reports about its network (Applied.network)
ISOLATED = "isolated"
ISOLATED_USER_NAMESPACE = "isolated (user namespace)"
NETWORK_OFF = "off"  # the policy said SandboxNetwork.OFF

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh22x"  # struct ifreq: the name, then ifr_flags in a 24-byte union
_LIBC = ctypes.CDLL(None, use_errno=True)
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one child may use. Core dumps are always off."""

    address_space_bytes: int | None = None  # RLIMIT_AS, per process
    cpu_seconds: int | None = None  # RLIMIT_CPU, per process
    file_size_bytes: int | None = None  # RLIMIT_FSIZE
    resident_bytes: int | None = None  # the process group's RSS, watched by the parent

    def describe(self) -> str:
        parts = []
        if self.address_space_bytes is not None:
            parts.append(f"address space {_size(self.address_space_bytes)}")
        if self.cpu_seconds is not None:
            parts.append(f"cpu {self.cpu_seconds} s")
        if self.file_size_bytes is not None:
            parts.append(f"file size {_size(self.file_size_bytes)}")
        if self.resident_bytes is not None:
            parts.append(f"resident memory {_size(self.resident_bytes)}")
        return ", ".join([*parts, "no core dumps"])


@dataclass(frozen=True, slots=True)
class Policy:
    limits: Limits
    network: SandboxNetwork = SandboxNetwork.AUTO
    # May fall back to an unprivileged user namespace for the network namespace. Never for GPU
    # children: ids unmapped in a user namespace can lose access to /dev/nvidia*.
    user_namespace: bool = False


@dataclass(frozen=True, slots=True)
class Applied:
    """What a child actually ran under."""

    limits: Limits
    network: str  # ISOLATED, ISOLATED_USER_NAMESPACE, NETWORK_OFF or "unavailable: <why>"

    @property
    def network_isolated(self) -> bool:
        return self.network.startswith(ISOLATED)

    def describe(self) -> str:
        return f"network {self.network}; {self.limits.describe()}"


class NamespaceSetupFailed(RuntimeError):
    """Raised in the child when it entered a user namespace but could not map its ids."""


def _size(count: int) -> str:
    if count % GIB == 0:
        return f"{count // GIB} GiB"
    if count % MIB == 0:
        return f"{count // MIB} MiB"
    return f"{count} bytes"


def nvcc_policy(config: EngineConfig | None = None) -> Policy:
    config = config or load_config()
    limits = Limits(
        address_space_bytes=config.nvcc_memory_gb * GIB,
        cpu_seconds=config.nvcc_cpu_seconds,
        file_size_bytes=config.child_file_size_mb * MIB,
    )
    return Policy(limits, network=config.sandbox_network, user_namespace=True)


def gpu_policy(config: EngineConfig | None = None) -> Policy:
    """For children that run candidates on the GPU (verifier, sanitizer, measurements)."""
    config = config or load_config()
    limits = Limits(
        file_size_bytes=config.child_file_size_mb * MIB,
        resident_bytes=config.child_memory_gb * GIB,
    )
    return Policy(limits, network=config.sandbox_network, user_namespace=False)


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def is_passed(name: str) -> bool:
    return (name in PASSED_NAMES or name.startswith(PASSED_PREFIXES)) and not is_secret(name)


def candidate_env(
    home: Path, *, cache_dir: Path | None = None, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a candidate child: the allow-listed part of ``source`` (os.environ),
    HOME and TMPDIR set to ``home`` (a private empty folder), and ENGINE_CACHE_DIR pinned to the
    parent's cache (without it the child would derive one from its own HOME)."""
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items() if is_passed(name)}
    env["HOME"] = env["TMPDIR"] = str(home)
    env[CACHE_DIR_VARIABLE] = str(cache_dir or load_config().cache_dir)
    return env


def engine_child_env(workdir: Path) -> dict[str, str]:
    """The environment of a Python child that runs an engine module from ``workdir`` (an empty
    folder, not the repository): :func:`candidate_env` with a private HOME inside ``workdir``
    and this repository first on PYTHONPATH, so that ``python -m engine...`` still imports."""
    env = candidate_env(private_home(workdir))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def private_home(workdir: Path) -> Path:
    """An empty folder inside ``workdir`` for a child's HOME and TMPDIR."""
    home = workdir / "home"
    home.mkdir(mode=0o700)
    return home


# --------------------------------------------------------------------------------------------
# In the child, between fork and exec. No imports here, and no locks: the parent may have threads.


def child_setup(policy: Policy, report_fd: int) -> Callable[[], None]:
    """The preexec_fn that applies ``policy`` and writes the network outcome to ``report_fd``."""

    def setup() -> None:
        _set_limits(policy.limits)
        isolate = policy.network == SandboxNetwork.AUTO
        outcome = _isolate_network(policy.user_namespace) if isolate else None
        os.write(report_fd, (outcome or NETWORK_OFF).encode())

    return setup


def _set_limits(limits: Limits) -> None:
    _lower(resource.RLIMIT_CORE, 0)
    if limits.file_size_bytes is not None:
        _lower(resource.RLIMIT_FSIZE, limits.file_size_bytes)
    if limits.address_space_bytes is not None:
        _lower(resource.RLIMIT_AS, limits.address_space_bytes)
    if limits.cpu_seconds is not None:
        # SIGXCPU at the soft limit (reported as "cpu_time"), SIGKILL a little later
        _lower(resource.RLIMIT_CPU, limits.cpu_seconds, hard=limits.cpu_seconds + 10)


def _lower(kind: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(kind)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def _isolate_network(user_namespace: bool) -> str:
    if _LIBC.unshare(_CLONE_NEWNET) == 0:
        return _with_loopback(ISOLATED)
    failure = ctypes.get_errno()
    if user_namespace:
        uid, gid = os.getuid(), os.getgid()
        if _LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
            _map_own_ids(uid, gid)
            return _with_loopback(ISOLATED_USER_NAMESPACE)
        failure = ctypes.get_errno()
    return f"unavailable: {errno.errorcode.get(failure, str(failure))}"


def _map_own_ids(uid: int, gid: int) -> None:
    """Maps the child's ids to themselves, so that its files keep their owner."""
    try:
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    except OSError as exc:  # the parent retries without a network namespace
        raise NamespaceSetupFailed(str(exc)) from None


def _with_loopback(outcome: str) -> str:
    """Brings the new namespace's loopback up: compute-sanitizer talks to its target over it."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack(_IFREQ, b"lo", 0)
            flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    except OSError as exc:
        return f"{outcome}, no loopback ({errno.errorcode.get(exc.errno or 0, exc)})"
    return outcome


# --------------------------------------------------------------------------------------------
# In the parent


def read_report(policy: Policy, read_fd: int) -> Applied:
    """What the child wrote before exec (it has exec'd by now, so the bytes are there)."""
    os.set_blocking(read_fd, False)
    try:
        written = os.read(read_fd, 256).decode(errors="replace")
    except BlockingIOError:
        written = ""
    finally:
        os.close(read_fd)
    return Applied(policy.limits, written or "unavailable: no report from the child")


def group_resident_bytes(pgid: int) -> int:
    """The summed resident memory of every process in group ``pgid`` (shared pages count once
    per process, so this errs high)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # gone meanwhile
            continue
        # after the command name in parentheses: state, ppid, pgrp, … rss is the 22nd
        fields = stat.rsplit(b")", 1)[1].split()
        if int(fields[2]) == pgid:
            total += int(fields[21]) * _PAGE_BYTES
    return total
