"""The compile stage: CUDA C++ source text in, a shared library (or the reason there is none) out.

Every kernel library is built with the same nvcc command line (see :func:`nvcc_command`) into a
content-addressed cache::
    <cache>/kernels/<key[:2]>/<key>/{kernel.cu, lib.so, result.json, build.log}

where ``key`` hashes the source, target archs, flags, libraries, the nvcc and CUTLASS versions and
:data:`CACHE_FORMAT_VERSION`. A build tries the cache, then takes a file lock on the entry, checks
again and builds in a temporary folder that is renamed into place, so concurrent workers never see
half an entry. Failed builds are cached too (with their log), timed-out ones are not.

A source that embeds a Triton kernel (engine.compilation.triton_aot) is built in two steps in the
same sandbox: the Triton kernel is compiled for the first arch into ``gemmforge_triton.h`` (its
cubin), then nvcc builds the launcher that includes it. Its key also hashes Triton's version.

nvcc errors and timeouts are data (``CompileResult.ok`` is False); exceptions are raised only for
setup errors (engine.compilation.toolkit.CompileSetupError: no nvcc, no CUTLASS headers, Triton
missing for a Triton source) and programmer errors.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from engine import abi
from engine.codegen import get_family, triton_blocks
from engine.compilation import triton_aot
from engine.compilation.toolkit import (
    cutlass_include_dir,
    cutlass_version,
    nvcc_version,
    triton_version,
)
from engine.config import EngineConfig
from engine.config import load as load_config
from engine.isolation import processes, sandbox

CACHE_FORMAT_VERSION = 1
DEFAULT_ARCHS: tuple[str, ...] = ("sm_90a",)
SOURCE_NAME = "kernel.cu"
LIBRARY_NAME = "lib.so"
RESULT_NAME = "result.json"
LOG_NAME = "build.log"
# A build's time on one core, before any of its family has been timed here: the CUTLASS families'
# 45 s (the sm90 library's median is 35 s, p90 58.5 s, bench/NOTES.md §14) and, for the others,
# their mean rounded up (3.4 s and 2.6 s over 10 builds each on a loaded 2-core machine,
# docs/cli.md "Prebuilding the kernel library").
BUILD_SECONDS = 45.0
FAMILY_BUILD_SECONDS = {"longk": 4.0, "triton": 3.0}


def build_seconds_prior(family: str | None) -> float:
    """One build of ``family`` on one core, before any of them was timed (seconds)."""
    return FAMILY_BUILD_SECONDS.get(family or "", BUILD_SECONDS)


# Flags every library is built with (the arch and include flags are added by nvcc_command).
BASE_FLAGS: tuple[str, ...] = (
    "-shared",
    "-Xcompiler",
    "-fPIC",
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-lineinfo",
    "-DNDEBUG",  # device asserts are calls that serialize wgmma (ptxas C7510)
    "-Xptxas",
    "-v",
)

_ARCH_RE = re.compile(r"^sm_([0-9]{2,3})(a?)$")
_OUT_OF_MEMORY_RE = re.compile(r"out of memory|memory allocation fail|bad_alloc", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class KernelResources:
    """What ptxas reported for one entry function (``__global__`` kernel) on one arch."""

    name: str  # mangled entry name
    arch: str  # e.g. "sm_90a"
    registers: int
    shared_bytes: int  # static shared memory (dynamic smem is set at launch, not reported)
    stack_bytes: int  # stack frame
    spill_stores_bytes: int
    spill_loads_bytes: int
    constant_bytes: int = 0  # cmem[0]: kernel parameters and constants
    barriers: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_stores_bytes > 0 or self.spill_loads_bytes > 0

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelResources:
        return cls(**{name: data[name] for name in cls.__slots__ if name in data})


@dataclass(frozen=True)
class CompileResult:
    """The outcome of one build. ``ok`` is True exactly when ``library`` exists."""

    ok: bool
    library: Path | None  # the shared library inside the cache entry
    source_hash: str  # sha256 of the source text
    archs: tuple[str, ...]
    command: str  # shell-quoted nvcc command, run inside the entry folder
    log: str  # nvcc's stdout + stderr (truncated)
    seconds: float  # wall time of the build that made the entry (not of a cache hit)
    cached: bool  # True when this result was loaded from the cache
    resources: tuple[KernelResources, ...] = ()
    error: str | None = None  # one line for the UI when not ok
    timed_out: bool = False
    key: str = ""  # cache key (the entry folder's name)
    entry: Path | None = field(default=None, compare=False)  # the cache entry folder
    sandbox: str = ""  # what nvcc ran under (engine.isolation.sandbox.Applied.describe)

    @property
    def spills(self) -> bool:
        return any(r.spills for r in self.resources)

    @property
    def max_registers(self) -> int:
        return max((r.registers for r in self.resources), default=0)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; paths are stored relative to the entry folder."""
        return {
            "format": CACHE_FORMAT_VERSION,
            "ok": self.ok,
            "library": LIBRARY_NAME if self.library is not None else None,
            "source_hash": self.source_hash,
            "archs": list(self.archs),
            "command": self.command,
            "log": self.log,
            "seconds": self.seconds,
            "resources": [r.to_dict() for r in self.resources],
            "error": self.error,
            "timed_out": self.timed_out,
            "key": self.key,
            "sandbox": self.sandbox,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, entry: Path, cached: bool = True) -> CompileResult:
        library = entry / data["library"] if data.get("library") else None
        return cls(
            ok=bool(data["ok"]),
            library=library,
            source_hash=data["source_hash"],
            archs=tuple(data["archs"]),
            command=data["command"],
            log=data["log"],
            seconds=float(data["seconds"]),
            cached=cached,
            resources=tuple(KernelResources.from_dict(r) for r in data.get("resources", ())),
            error=data.get("error"),
            timed_out=bool(data.get("timed_out", False)),
            key=data.get("key", entry.name),
            entry=entry,
            sandbox=data.get("sandbox", ""),
        )


def arch_flags(arch: str) -> list[str]:
    """``"sm_90a"`` → ``["-gencode=arch=compute_90a,code=sm_90a"]`` (SASS only, no PTX)."""
    match = _ARCH_RE.match(arch)
    if match is None:
        raise ValueError(f"unknown arch {arch!r}: expected e.g. sm_80, sm_90 or sm_90a")
    number, suffix = match.groups()
    return [f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"]


def nvcc_command(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    archs: Sequence[str] = DEFAULT_ARCHS,
    libraries: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
    nvcc: str = "nvcc",
    include_dirs: Sequence[Path] | None = None,
) -> list[str]:
    """The full nvcc argv that builds ``source`` into the shared library ``output``."""
    includes = include_dirs if include_dirs is not None else (abi.CUDA_DIR, cutlass_include_dir())
    argv = [nvcc, *BASE_FLAGS]
    for arch in archs:
        argv += arch_flags(arch)
    argv += [f"-I{path}" for path in includes]
    argv += list(extra_flags)
    argv += [os.fspath(source), "-o", os.fspath(output)]
    argv += [f"-l{lib}" for lib in libraries]
    return argv


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def cache_key(
    source: str,
    *,
    archs: Sequence[str],
    flags: Sequence[str],
    libraries: Sequence[str],
    nvcc_version: str,
    cutlass_version: str,
    triton_version: str | None = None,
) -> str:
    """sha256 over everything that changes the built library. Stable across processes.
    ``triton_version`` only for sources that embed a Triton kernel (other keys are unchanged)."""
    fields = {
        "format": CACHE_FORMAT_VERSION,
        "source": source_hash(source),
        "archs": list(archs),
        "flags": list(flags),
        "libraries": list(libraries),
        "nvcc": nvcc_version,
        "cutlass": cutlass_version,
    }
    if triton_version is not None:
        fields["triton"] = triton_version
    payload = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# ptxas report parsing

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(
    r"([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads"
)
_USED_RE = re.compile(r"Used ([0-9]+) registers")
_BARRIERS_RE = re.compile(r"used ([0-9]+) barriers")
_SMEM_RE = re.compile(r"([0-9]+) bytes smem")
_CMEM_RE = re.compile(r"([0-9]+) bytes cmem\[0\]")


def parse_ptxas(log: str) -> tuple[KernelResources, ...]:
    """Per-entry resources from nvcc ``-Xptxas -v`` output (pure; unknown lines are ignored).

    ptxas reports, for each entry and arch::
        ptxas info    : Compiling entry function '<name>' for '<arch>'
        ptxas info    : Function properties for <name>
            <n> bytes stack frame, <n> bytes spill stores, <n> bytes spill loads
        ptxas info    : Used <n> registers, used <n> barriers, <n> bytes smem, <n> bytes cmem[0]
    """
    found: list[KernelResources] = []
    entry: tuple[str, str] | None = None
    frame: tuple[int, int, int] = (0, 0, 0)
    props_for: str | None = None
    for line in log.splitlines():
        if match := _ENTRY_RE.search(line):
            entry = (match.group(1), match.group(2))
            frame, props_for = (0, 0, 0), None
        elif match := _PROPS_RE.search(line):
            props_for = match.group(1)
        elif match := _FRAME_RE.search(line):
            if entry is not None and props_for == entry[0]:
                frame = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
        elif (match := _USED_RE.search(line)) and entry is not None:
            barriers, smem, cmem = (
                _BARRIERS_RE.search(line),
                _SMEM_RE.search(line),
                _CMEM_RE.search(line),
            )
            found.append(
                KernelResources(
                    name=entry[0],
                    arch=entry[1],
                    registers=int(match.group(1)),
                    shared_bytes=int(smem.group(1)) if smem else 0,
                    stack_bytes=frame[0],
                    spill_stores_bytes=frame[1],
                    spill_loads_bytes=frame[2],
                    constant_bytes=int(cmem.group(1)) if cmem else 0,
                    barriers=int(barriers.group(1)) if barriers else 0,
                )
            )
            entry = None
    return tuple(found)


def first_error(log: str) -> str:
    """The first line that looks like a compiler error, for a one-line summary."""
    for line in log.splitlines():
        if "error" in line.lower() and "ptxas info" not in line:
            return line.strip()[:500]
    lines = [line for line in log.splitlines() if line.strip()]
    return lines[-1].strip()[:500] if lines else "nvcc failed without output"


# --------------------------------------------------------------------------------------------
# The cache


def entry_dir(key: str, config: EngineConfig) -> Path:
    return config.kernel_cache / key[:2] / key


def try_load(key: str, config: EngineConfig) -> CompileResult | None:
    """The cached result for ``key``, or None when there is no complete entry. Never raises."""
    entry = entry_dir(key, config)
    try:
        data = json.loads((entry / RESULT_NAME).read_text())
        result = CompileResult.from_json(data, entry=entry)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.get("format") != CACHE_FORMAT_VERSION:
        return None
    if result.ok and (result.library is None or not result.library.is_file()):
        return None
    return result


def source_key(
    source: str,
    *,
    archs: Sequence[str] = DEFAULT_ARCHS,
    libraries: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
    config: EngineConfig | None = None,
) -> str:
    """The cache key :func:`compile_source` builds or loads ``source`` under (same arguments).

    Raises :class:`CompileSetupError` when nvcc or the CUTLASS headers are missing."""
    config = config or load_config()
    return cache_key(
        source,
        archs=tuple(archs),
        flags=(*BASE_FLAGS, *extra_flags),
        libraries=tuple(libraries),
        nvcc_version=nvcc_version(config.nvcc),
        cutlass_version=cutlass_version(),
        triton_version=triton_version() if triton_blocks.is_triton_source(source) else None,
    )


def compile_source(
    source: str,
    *,
    archs: Sequence[str] = DEFAULT_ARCHS,
    libraries: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
    config: EngineConfig | None = None,
    timeout: float = processes.Timeout.NVCC,
    use_cache: bool = True,
) -> CompileResult:
    """Build ``source`` into a shared library, or load the identical earlier build.

    Never raises for nvcc errors or timeouts (they are in the result). Raises
    :class:`CompileSetupError` when nvcc or the CUTLASS headers are missing, ValueError for an
    unknown arch.
    """
    config = config or load_config()
    archs = tuple(archs)
    libraries = tuple(libraries)
    extra_flags = tuple(extra_flags)
    for arch in archs:
        arch_flags(arch)  # validate early
    key = source_key(
        source, archs=archs, libraries=libraries, extra_flags=extra_flags, config=config
    )
    if use_cache and (hit := try_load(key, config)) is not None:
        return hit
    entry = entry_dir(key, config)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry.parent / f"{key}.lock")):
        if use_cache and (hit := try_load(key, config)) is not None:
            return hit
        return _build(source, key, entry, archs, libraries, extra_flags, config, timeout)


def _build(
    source: str,
    key: str,
    entry: Path,
    archs: tuple[str, ...],
    libraries: tuple[str, ...],
    extra_flags: tuple[str, ...],
    config: EngineConfig,
    timeout: float,
) -> CompileResult:
    """Build in a temporary sibling folder; rename it into place unless the build timed out."""
    work = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=entry.parent))
    try:
        (work / SOURCE_NAME).write_text(source)
        argv = nvcc_command(
            SOURCE_NAME,
            LIBRARY_NAME,
            archs=archs,
            libraries=libraries,
            extra_flags=extra_flags,
            nvcc=config.nvcc,
        )
        started = time.monotonic()
        policy = sandbox.nvcc_policy(config)
        logs: list[str] = []
        with tempfile.TemporaryDirectory(prefix="gemmforge-nvcc-") as home:
            env = sandbox.candidate_env(Path(home), cache_dir=config.cache_dir)
            proc = None
            if triton_blocks.is_triton_source(source):
                proc = _triton_step(work, archs[0], env, timeout, policy)
                logs += [part for part in (proc.stdout, proc.stderr) if part]
            if proc is None or proc.ok:
                left = timeout - (time.monotonic() - started)
                proc = processes.run(argv, timeout=left, cwd=work, env=env, policy=policy)
                logs += [part for part in (proc.stdout, proc.stderr) if part]
        seconds = time.monotonic() - started
        log = "\n".join(logs)
        (work / LOG_NAME).write_text(log)
        ok = proc.ok and (work / LIBRARY_NAME).is_file()
        # a build stopped by a limit says nothing final about the source: never cached
        stopped = proc.timed_out or proc.killed_for is not None or _out_of_memory(log)
        if proc.timed_out:
            error: str | None = f"nvcc timed out after {timeout:g} s"
        elif not ok and stopped:
            error = f"{first_error(log)} (under the sandbox's {policy.limits.describe()})"
        elif not ok:
            error = first_error(log)
        else:
            error = None
        result = CompileResult(
            ok=ok,
            library=entry / LIBRARY_NAME if ok else None,
            source_hash=source_hash(source),
            archs=archs,
            command=proc.command,
            log=log,
            seconds=seconds,
            cached=False,
            resources=parse_ptxas(log),
            error=error,
            timed_out=proc.timed_out,
            key=key,
            entry=entry,
            sandbox=proc.sandbox.describe() if proc.sandbox else "",
        )
        if stopped and not ok:
            return CompileResult(**{**_fields(result), "library": None, "entry": None})
        if not ok:
            (work / LIBRARY_NAME).unlink(missing_ok=True)
        (work / RESULT_NAME).write_text(json.dumps(result.to_json(), indent=1))
        if entry.exists():  # a stale or partial entry (we hold the lock): replace it
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(work, entry)
        return result
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _triton_step(
    work: Path, arch: str, env: dict[str, str], timeout: float, policy: sandbox.Policy
) -> processes.ProcessResult:
    """Compiles the Triton kernel the source embeds into ``gemmforge_triton.h`` (a child under
    the same sandbox as nvcc: the kernel's Python source runs there, never in this process)."""
    child_env = {
        **env,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(sandbox.REPO_ROOT), env.get("PYTHONPATH")])
        ),
    }
    argv = [sys.executable, "-m", triton_aot.__name__, SOURCE_NAME, triton_aot.HEADER_NAME, arch]
    return processes.run(argv, timeout=timeout, cwd=work, env=child_env, policy=policy)


def _out_of_memory(log: str) -> bool:
    """How cicc, ptxas and the host compiler report an allocation refused under RLIMIT_AS."""
    return _OUT_OF_MEMORY_RE.search(log) is not None


def _fields(result: CompileResult) -> dict[str, Any]:
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


def compile_many(
    sources: Sequence[str],
    *,
    jobs: int | None = None,
    progress: Callable[[int, CompileResult], None] | None = None,
    config: EngineConfig | None = None,
    per_source: Sequence[Mapping[str, Any]] | None = None,
    **kwargs: Any,
) -> list[CompileResult]:
    """Compile ``sources`` in parallel (threads driving nvcc processes); results keep input order.
    The compile stage's build pool (:func:`compile_configs` is a thin wrapper of it).

    ``jobs`` defaults to ``config.compile_jobs``; ``progress(index, result)`` is called as each
    build finishes (from worker threads). Other keyword arguments go to :func:`compile_source`
    for every source; ``per_source[i]`` (one mapping per source) adds or overrides them for
    source ``i``, so that builds with different arguments (say each family's archs) share the
    pool and keep every core busy.
    """
    if per_source is not None and len(per_source) != len(sources):
        raise ValueError(f"{len(per_source)} argument sets for {len(sources)} sources")
    if not sources:
        return []
    config = config or load_config()
    jobs = max(1, jobs or config.compile_jobs)
    results: list[CompileResult | None] = [None] * len(sources)
    # Resolve (and cache) the toolchain facts once, so setup errors surface here, not in a thread.
    nvcc_version(config.nvcc)
    cutlass_version()
    with ThreadPoolExecutor(max_workers=min(jobs, len(sources))) as pool:
        futures = {
            pool.submit(
                compile_source,
                source,
                config=config,
                **{**kwargs, **(per_source[index] if per_source is not None else {})},
            ): index
            for index, source in enumerate(sources)
        }
        for future in as_completed(futures):
            index = futures[future]
            results[index] = future.result()
            if progress is not None:
                progress(index, results[index])  # type: ignore[arg-type]
    return [r for r in results if r is not None]


def compile_configs(
    configs: Sequence[Any],
    *,
    jobs: int | None = None,
    config: Any = None,
    target_arch: str | None = None,
) -> list[CompileResult]:
    """Render and compile kernel configs (engine.codegen; cached); results keep order. Every
    family's builds share one pool of ``jobs`` (default ``config.compile_jobs``; the pool is
    :func:`compile_many`'s), so a batch that mixes families keeps every core busy. Imports no
    torch, so a GPU step can look its batch up in the cache before it does.

    ``target_arch`` (the GPU's, e.g. ``sm_90``) builds only the SASS that GPU runs."""

    return compile_many(
        [c.render() for c in configs],
        jobs=jobs,
        config=config,
        per_source=[{"archs": get_family(c.FAMILY).archs_for(target_arch)} for c in configs],
    )


def config_keys(
    configs: Sequence[Any], *, config: EngineConfig | None = None, target_arch: str | None = None
) -> list[str]:
    """The cache keys :func:`compile_configs` (same ``target_arch``) builds or loads ``configs``
    under, in order, without compiling: what a GPU step fetches from a shared artifact store.

    Raises :class:`CompileSetupError` when nvcc or the CUTLASS headers are missing."""

    config = config or load_config()
    return [
        source_key(c.render(), archs=get_family(c.FAMILY).archs_for(target_arch), config=config)
        for c in configs
    ]
