"""Compile-cache entries as bytes, for a store that machines share.

A compile worker packs one successful entry of the compile cache (engine.compilation.compile's
layout: ``kernel.cu``, ``lib.so``, ``result.json``, ``build.log``) into an *artifact*: a gzip'd tar
of those files and a manifest (``artifact.json``: the cache key, each file's sha256 and size, the
sha256 of the ABI header the kernel included, and where and when it was packed). A GPU worker
installs an artifact into its own compile cache, where engine.compilation.compile.try_load (and so
the GPU step) finds it.

The artifact's name is engine.compilation.compile's cache key, a sha256 over the source, archs,
flags, libraries and the nvcc and CUTLASS versions. The key does not cover the engine's own header
(``engine/cuda/gemmforge_abi.h``, included by every kernel) nor the host compiler and C library, so
the manifest records them: an artifact packed against another ABI header is refused; the host facts
are for diagnosis.

Installing checks everything before writing anything: the tar holds only the expected plain
files, each matches its recorded sha256 (the library's included), the result says ``ok`` for this
very key and its source hash is the source's. The entry is written to a temporary folder beside
its place and renamed into it under the entry's file lock (engine.compilation.compile's), so the
cache never holds half an entry. A refusal is data (:class:`Installed`), never an exception.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import tarfile
import tempfile
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from engine import abi
from engine.compilation.compile import (
    CACHE_FORMAT_VERSION,
    LIBRARY_NAME,
    LOG_NAME,
    RESULT_NAME,
    SOURCE_NAME,
    entry_dir,
    source_hash,
    try_load,
)
from engine.config import EngineConfig
from engine.config import load as load_config

ARTIFACT_FORMAT = 1
MANIFEST_NAME = "artifact.json"
REQUIRED_FILES = (SOURCE_NAME, LIBRARY_NAME, RESULT_NAME)
ENTRY_FILES = (*REQUIRED_FILES, LOG_NAME)  # the build log is kept when there is one
MAX_FILE_BYTES = 256 << 20  # an artifact's file larger than this is refused (a gzip bomb)


@dataclass(frozen=True)
class Installed:
    """What :func:`install_entry` did with one artifact."""

    key: str
    status: str  # "installed"; "present": the cache had the entry already; "refused"
    reason: str = ""  # why it was refused, for the log


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.cache
def abi_header_sha256() -> str:
    """sha256 of ``gemmforge_abi.h``, which every kernel includes but the cache key omits."""
    return sha256(abi.HEADER.read_bytes())


def pack_entry(key: str, config: EngineConfig | None = None, *, compress_level: int = 1) -> bytes:
    """The artifact of the successful cache entry ``key``, or ``b""`` when the cache has none
    (no entry, a failed build, or a file missing). Reads the entry, never changes it.

    ``compress_level``: gzip's, 1–9; 0 packs a plain tar (install reads either)."""
    config = config or load_config()
    result = try_load(key, config)
    if result is None or not result.ok or result.entry is None:
        return b""
    files: dict[str, bytes] = {}
    for name in ENTRY_FILES:
        try:
            files[name] = (result.entry / name).read_bytes()
        except OSError:
            if name in REQUIRED_FILES:
                return b""
    manifest = {
        "format": ARTIFACT_FORMAT,
        "key": key,
        "files": {
            name: {"sha256": sha256(data), "bytes": len(data)} for name, data in files.items()
        },
        "abi_header_sha256": abi_header_sha256(),
        "packed_by": socket.gethostname(),
        "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.platform(),
        "libc": " ".join(platform.libc_ver()),
    }
    members = {MANIFEST_NAME: json.dumps(manifest, indent=1).encode(), **files}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name == LIBRARY_NAME else 0o644
            tar.addfile(info, io.BytesIO(data))
    packed = buffer.getvalue()
    return (
        gzip.compress(packed, compresslevel=compress_level, mtime=0) if compress_level else packed
    )


def unpack(key: str, data: bytes) -> tuple[dict[str, bytes], str]:
    """The entry's files of an artifact for ``key`` and ``""``, or ``({}, reason)`` when any
    check fails (see the module's docstring). Pure: writes nothing."""
    try:
        members = _members(data)
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as exc:
        return {}, f"not a readable artifact ({type(exc).__name__}: {exc})"
    if isinstance(members, str):
        return {}, members
    try:
        manifest = json.loads(members.pop(MANIFEST_NAME, b"null"))
        recorded = manifest["files"]
        if manifest["format"] != ARTIFACT_FORMAT:
            return {}, f"artifact format {manifest['format']!r}, not {ARTIFACT_FORMAT}"
        if manifest["key"] != key:
            return {}, f"the artifact is for key {manifest['key']!r}"
        header = manifest["abi_header_sha256"]
    except (ValueError, TypeError, KeyError) as exc:
        return {}, f"no usable manifest ({type(exc).__name__}: {exc})"
    if header != abi_header_sha256():
        return {}, "built against another gemmforge_abi.h than this machine's"
    if set(recorded) != set(members) or not set(REQUIRED_FILES) <= set(members):
        return {}, f"files {sorted(members)} do not match the manifest's {sorted(recorded)}"
    for name, content in members.items():
        if recorded[name].get("sha256") != sha256(content):
            return {}, f"{name}: sha256 differs from the one recorded at publish"
    if reason := _check_result(key, members):
        return {}, reason
    return members, ""


def _members(data: bytes) -> dict[str, bytes] | str:
    """The tar's files by name, or why they are not acceptable."""
    allowed = {MANIFEST_NAME, *ENTRY_FILES}
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for info in tar:
            if info.name not in allowed or not info.isfile() or info.name in members:
                return f"unexpected member {info.name!r} (type {info.type!r})"
            if info.size > MAX_FILE_BYTES:
                return f"{info.name} is {info.size} bytes, over {MAX_FILE_BYTES}"
            handle = tar.extractfile(info)
            if handle is None:
                return f"cannot read {info.name!r}"
            members[info.name] = handle.read()
    return members


def _check_result(key: str, files: Mapping[str, bytes]) -> str:
    """Why ``result.json`` does not describe a successful build of ``key``; ``""`` when it does."""
    try:
        result = json.loads(files[RESULT_NAME])
        facts = (result["format"], result["ok"], result["key"], result["library"])
        source = files[SOURCE_NAME].decode()
    except (ValueError, TypeError, KeyError) as exc:
        return f"unusable {RESULT_NAME} ({type(exc).__name__}: {exc})"
    if facts != (CACHE_FORMAT_VERSION, True, key, LIBRARY_NAME):
        return f"{RESULT_NAME} is not a successful build of this key: {facts!r}"
    if result.get("source_hash") != source_hash(source):
        return f"{SOURCE_NAME} is not the source {RESULT_NAME} was built from"
    return ""


def install_entry(key: str, data: bytes, config: EngineConfig | None = None) -> Installed:
    """Install the artifact ``data`` as the cache entry ``key``, whole or not at all.

    An entry the cache has already is left as it is (``present``). Never raises for a bad
    artifact (``refused``, with the reason); OSError for a cache folder it cannot write."""
    config = config or load_config()
    if try_load(key, config) is not None:
        return Installed(key, "present")
    files, reason = unpack(key, data)
    if reason:
        return Installed(key, "refused", reason)
    entry = entry_dir(key, config)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry.parent / f"{key}.lock")):
        if try_load(key, config) is not None:
            return Installed(key, "present")
        work = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=entry.parent))
        try:
            for name, content in files.items():
                (work / name).write_bytes(content)
            (work / LIBRARY_NAME).chmod(0o755)
            if entry.exists():  # a stale or partial entry (we hold the lock): replace it
                shutil.rmtree(entry, ignore_errors=True)
            os.replace(work, entry)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    return Installed(key, "installed")
