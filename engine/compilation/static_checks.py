"""The static gate: checks on a candidate's source before any GPU time, and on its built library.

Two stages, each returning a :class:`StaticResult` (a rejection is data, never an exception):
* :func:`check_source` — size (≤ :data:`MAX_SOURCE_BYTES`), the ``#include`` allow-list, and a
  regex pre-filter for forbidden APIs (streams, syncs, allocation, L2 policy, cuBLAS, dynamic
  loading, threads and processes, files and the environment, token pasting). The regex scan is a
  cheap first filter only (docs/verification.md row 22): it can be evaded (string concatenation,
  asm labels).
* :func:`check_library` — ``nm -D --undefined-only`` on the built ``.so`` against a symbol
  allow-list: the binding check.

Why candidates are built against the *shared* CUDA runtime (:func:`candidate_flags`): nvcc links
cudart statically by default, and the static runtime itself imports dlopen, dlsym,
pthread_create, socket, connect, getenv, fopen, … so in a default build those imports cannot be
told from the candidate's, and the runtime API it calls (cudaStreamCreate, …) is resolved inside
the library and never shows up. With ``-cudart shared`` every import of the library is the
candidate's own (or CUTLASS's, compiled into the same object), and the allow-list is exact.
A library that links the runtime statically is rejected unless ``allow_static_runtime`` is set,
in which case the runtime's own imports (:data:`STATIC_RUNTIME_IMPORTS`) are tolerated and the
finding list says the check was weaker.

:func:`check_candidate` is the single entry point (source, then the library when given).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.codegen import triton_blocks
from engine.compilation import triton_aot
from engine.compilation.toolkit import cuda_library_dir
from engine.isolation import processes
from engine.outcomes import Reason

MAX_SOURCE_BYTES = 256 * 1024

# Reasons, in the order the gate applies them.
SIZE, INCLUDE, API, SYMBOLS = (
    Reason.STATIC_SIZE,
    Reason.STATIC_INCLUDE,
    Reason.STATIC_API,
    Reason.STATIC_SYMBOLS,
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the gate objects to."""

    reason: str  # one of SIZE, INCLUDE, API, SYMBOLS
    message: str
    line: int | None = None  # 1-based source line, for source findings
    subject: str = ""  # the header, API pattern or symbol named

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True)
class StaticResult:
    """``ok`` is True exactly when ``findings`` is empty; ``reason`` is the first finding's."""

    ok: bool
    reason: str  # "ok" or the reason of the first finding
    message: str
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what the gate could not check, for the record

    @classmethod
    def from_findings(cls, findings: Iterable[Finding], notes: Sequence[str] = ()) -> StaticResult:
        found = tuple(findings)
        if not found:
            return cls(True, Reason.OK, "static checks passed", (), tuple(notes))
        first = found[0]
        where = f" (line {first.line})" if first.line else ""
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        return cls(False, first.reason, f"{first.message}{where}{more}", found, tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------
# Source: includes

# Headers a candidate may include by name. Only the candidate's own #include lines are checked;
# what the allowed headers include in turn is the toolkit's business.
ALLOWED_HEADERS = frozenset(
    {
        # the gemmforge ABI and the reference loop
        "gemmforge_abi.h",
        "reference_gemm.cuh",
        # written by the build of a source embedding a Triton kernel (engine.compilation.triton_aot)
        "gemmforge_triton.h",
        # CUDA toolkit
        "cuda.h",
        "cuda_runtime.h",
        "cuda_runtime_api.h",
        "cuda_fp16.h",
        "cuda_fp16.hpp",
        "cuda_bf16.h",
        "cuda_bf16.hpp",
        "cuda_fp8.h",
        "cuda_fp8.hpp",
        "cudaTypedefs.h",
        "mma.h",
        "cooperative_groups.h",
        "cuda_pipeline.h",
        "cuda_pipeline_primitives.h",
        "cuda_awbarrier.h",
        "cuda_awbarrier_primitives.h",
        "vector_types.h",
        "vector_functions.h",
        "device_launch_parameters.h",
        "device_functions.h",
        "driver_types.h",
        "library_types.h",
        "math_constants.h",
        "sm_60_atomic_functions.h",
        "sm_61_intrinsics.h",
        # C standard library
        "assert.h",
        "float.h",
        "limits.h",
        "math.h",
        "stdbool.h",
        "stddef.h",
        "stdint.h",
        "stdio.h",
        "stdlib.h",
        "string.h",
        # C++ standard library (no <thread>, <future>, <fstream>, <filesystem>, <csignal>)
        "algorithm",
        "array",
        "atomic",
        "cassert",
        "cfloat",
        "climits",
        "cmath",
        "cstddef",
        "cstdint",
        "cstdio",
        "cstdlib",
        "cstring",
        "functional",
        "initializer_list",
        "iostream",
        "iterator",
        "limits",
        "memory",
        "mutex",
        "new",
        "numeric",
        "optional",
        "tuple",
        "type_traits",
        "utility",
        "vector",
    }
)
# Header folders a candidate may include from: CUTLASS, CuTe, libcu++, cooperative groups.
ALLOWED_PREFIXES = ("cute/", "cutlass/", "cuda/", "cooperative_groups/", "nv/")

_DIRECTIVE_RE = re.compile(
    r"^[ \t]*#[ \t]*(include_next|include|import|embed)\b(.*)$", re.MULTILINE
)
_HEADER_RE = re.compile(r"""^\s*(?:<([^<>\n]*)>|"([^"\n]*)")\s*$""")
_HEADER_CHARS_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]*$")


def header_verdict(name: str) -> str | None:
    """None when ``name`` may be included, else why not."""
    if not name:
        return "empty header name"
    if name.startswith("/") or name.startswith("~"):
        return "absolute path"
    if ".." in name.split("/"):
        return "parent directory (..)"
    if "\\" in name or "//" in name or not _HEADER_CHARS_RE.match(name):
        return "unusual characters in the header name"
    if name in ALLOWED_HEADERS or name.startswith(ALLOWED_PREFIXES):
        return None
    return "not on the include allow-list (CUDA, CUTLASS, CuTe and standard headers)"


def check_includes(text: str) -> list[Finding]:
    """Every ``#include``/``#include_next``/``#import``/``#embed`` in comment-free ``text``."""
    findings = []
    for match in _DIRECTIVE_RE.finditer(text):
        directive, rest = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if directive != "include":
            findings.append(Finding(INCLUDE, f"#{directive} is not allowed", line, directive))
            continue
        header = _HEADER_RE.match(rest)
        if header is None:
            findings.append(
                Finding(INCLUDE, 'computed #include (a macro, not <…> or "…")', line, rest.strip())
            )
            continue
        name = header.group(1) if header.group(1) is not None else header.group(2)
        why = header_verdict(name)
        if why is not None:
            findings.append(Finding(INCLUDE, f"#include {name!r}: {why}", line, name))
    return findings


# --------------------------------------------------------------------------------------------
# Source: forbidden APIs (a cheap first filter)

_FORBIDDEN_API: tuple[tuple[str, str], ...] = (
    (
        r"\bcu(?:da)?(?:Stream|Event|Graph)(?:Create|Destroy)\w*",
        "creates streams, events or graphs",
    ),
    (r"\bcudaStream(?:Legacy|PerThread)\b", "uses the legacy or per-thread default stream"),
    (r"\bcudaEvent(?:Record|ElapsedTime|Query)\w*|\bcudaStreamWaitEvent\b", "uses events"),
    (
        r"\bcu(?:da)?(?:Device|Thread|Stream|Event|Ctx)Synchroni[sz]e\b",
        "synchronises (the harness owns synchronisation)",
    ),
    (
        r"\bcu(?:da)?(?:Malloc|Free|HostAlloc|MemAlloc|MemFree)\w*",
        "allocates or frees memory (the harness passes a workspace)",
    ),
    (r"\bcudaMem(?:cpy|set)(?:2D|3D)?\b", "synchronous copy or memset on the default stream"),
    (
        r"\bcudaStreamSetAttribute\b|\baccessPolicyWindow\b|\bcudaAccessProperty\w*"
        r"|\bcudaLimitPersistingL2CacheSize\b|\bcudaCtxResetPersistingL2Cache\b"
        r"|\bcu(?:da)?(?:Device|Ctx)SetLimit\b",
        "changes L2 persistence or device limits",
    ),
    (r"\bcublas\w*|\bcublasLt\w*|\bcudnn\w*|\bCUBLAS_\w+", "calls a vendor GEMM library"),
    (
        # resolving the TMA descriptor functions by name, as CUTLASS itself does, is allowed: a
        # literal "cuTensorMap..." (descriptor encoding and re-pointing) and nothing else
        r"\bdl(?:open|sym|vsym|mopen)\b"
        r"|\bcudaGetDriverEntryPoint\w*+(?!\s*\(\s*\"cuTensorMap\w+\"\s*,)"
        r"|\bcuGetProcAddress\w*+(?!\s*\(\s*\"cuTensorMap\w+\"\s*,)",
        "loads code or resolves symbols at run time",
    ),
    (
        r"\bpthread_create\b|\bstd::j?thread\b|\bstd::async\b|\b(?:v?fork|clone)\s*\("
        r"|\bexec(?:l|lp|le|v|vp|vpe|ve)\s*\(|\bsystem\s*\(|\bpopen\s*\(|\bposix_spawnp?\b",
        "starts threads or processes",
    ),
    (
        r"\b(?:fopen|freopen|fdopen|open|openat|creat)\s*\(|\bstd::[io]?fstream\b"
        r"|\bstd::filesystem\b|\bmmap\s*\(|\bsocket\s*\(|\bconnect\s*\(",
        "opens files or sockets",
    ),
    (r"\b(?:secure_)?getenv\b|\benviron\b|\bsetenv\b|\bputenv\b", "reads the environment"),
    (r"/proc/|/dev/|/etc/|/sys/|/tmp/|/home/|/root/", "names a filesystem path"),
    (r"\.incbin\b|\.include\b", "assembler file inclusion"),
    (r"##", "token pasting (can build API names the scan cannot see)"),
)
_FORBIDDEN_RES = tuple((re.compile(pattern), why) for pattern, why in _FORBIDDEN_API)
_LAUNCH_RE = re.compile(r"<<<(.*?)>>>", re.DOTALL)
_DEFAULT_STREAMS = {"0", "0u", "NULL", "nullptr", "cudaStreamLegacy", "cudaStreamPerThread"}


def _split_arguments(text: str) -> list[str]:
    """Top-level comma split (parentheses, brackets and braces nest)."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return parts


def check_apis(text: str) -> list[Finding]:
    """Forbidden API names and launches that are not on an explicit stream, in comment-free text
    (string literals are kept: ``dlsym(h, "cublasGemmEx")`` names cuBLAS too)."""
    findings = []
    for pattern, why in _FORBIDDEN_RES:
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            findings.append(Finding(API, f"{match.group(0)!r}: {why}", line, match.group(0)))
    for match in _LAUNCH_RE.finditer(text):
        args = _split_arguments(match.group(1))
        stream = args[3].replace(" ", "") if len(args) >= 4 else None
        if stream is None or stream.strip("()") in _DEFAULT_STREAMS or stream.endswith(")0"):
            line = text.count("\n", 0, match.start()) + 1
            findings.append(
                Finding(
                    API,
                    "kernel launch without the caller's stream (uses the default stream)",
                    line,
                    f"<<<{match.group(1).strip()}>>>",
                )
            )
    return sorted(findings, key=lambda f: f.line or 0)


_TOKEN_RE = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.DOTALL)


def normalise(source: str) -> str:
    """Source as the preprocessor sees it for our purposes: line splices joined (keeping line
    numbers), the ``%:`` digraph as ``#``, comments blanked (newlines kept), strings kept."""
    lines: list[str] = []
    joined, spliced = "", 0
    for raw in source.replace("\r\n", "\n").split("\n"):
        if raw.endswith("\\"):
            joined, spliced = joined + raw[:-1], spliced + 1
            continue
        lines += [joined + raw, *([""] * spliced)]
        joined, spliced = "", 0
    if spliced:
        lines += [joined, *([""] * (spliced - 1))]
    text = "\n".join(lines).replace("%:", "#")

    def blank(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith(("//", "/*")):
            return " " + "\n" * token.count("\n")
        return token

    return _TOKEN_RE.sub(blank, text)


def check_source(source: str) -> StaticResult:
    """Size, then includes, then forbidden APIs. Never raises for any text."""
    size = len(source.encode("utf-8", errors="replace"))
    if size > MAX_SOURCE_BYTES:
        return StaticResult.from_findings(
            [Finding(SIZE, f"source is {size} bytes (limit {MAX_SOURCE_BYTES})", None, str(size))]
        )
    if "\x00" in source:
        return StaticResult.from_findings([Finding(SIZE, "source contains NUL bytes")])
    text = normalise(source)
    return StaticResult.from_findings(
        [*check_includes(text), *check_apis(text), *check_triton(source)]
    )


def check_triton(source: str) -> list[Finding]:
    """The Python of an embedded Triton kernel (engine.compilation.triton_aot), which the build
    runs: only Triton and math, no builtin that reaches files or code, no private attributes."""

    if not triton_blocks.is_triton_source(source):
        return []
    try:
        _spec, python = triton_blocks.extract(source)
    except triton_blocks.TritonSourceError as exc:
        return [Finding(API, f"Triton block: {exc}", None, "gemmforge-triton")]
    before = source[: source.index(triton_blocks.SEPARATOR)].count("\n") + 2  # spec, then ---
    return [
        Finding(API, f"Triton source {what}", None if line is None else line + before, what)
        for line, what in triton_aot.python_findings(python)
    ]


# --------------------------------------------------------------------------------------------
# Library: the symbol allow-list

# What a CUTLASS/CuTe or hand-written kernel library imports from the shared CUDA runtime
# (seen in nm of the sm90 TMA/wgmma family, the sm80 family and the reference kernel, plus the
# launch, attribute, occupancy and error calls such kernels make). No stream, event, graph,
# sync, allocation, L2-policy or limit function is here.
ALLOWED_RUNTIME = frozenset(
    {
        "__cudaRegisterFatBinary",
        "__cudaRegisterFatBinaryEnd",
        "__cudaUnregisterFatBinary",
        "__cudaRegisterFunction",
        "__cudaRegisterVar",
        "__cudaRegisterManagedVar",
        "__cudaInitModule",
        "__cudaPushCallConfiguration",
        "__cudaPopCallConfiguration",
        "__cudaLaunchKernel",
        "__cudaLaunchKernel_ptsz",
        "__cudaGetKernel",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "cudaGetErrorString",
        "cudaGetErrorName",
        "cudaGetDevice",
        "cudaGetDeviceCount",
        "cudaDeviceGetAttribute",
        "cudaGetDeviceProperties",
        "cudaGetDeviceProperties_v2",
        "cudaFuncSetAttribute",
        "cudaFuncGetAttributes",
        "cudaFuncSetCacheConfig",
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
        "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        "cudaOccupancyMaxActiveClusters",
        "cudaOccupancyMaxPotentialClusterSize",
        "cudaMemsetAsync",  # CUTLASS stream-K/split-K workspace init, on the caller's stream
        "cudaMemcpyAsync",
        "cudaGetDriverEntryPoint",  # CUTLASS resolves cuTensorMapEncodeTiled (TMA) through these
        "cudaGetDriverEntryPointByVersion",
        "cudaDriverGetVersion",
        "cudaRuntimeGetVersion",
        "cudaPointerGetAttributes",
        # a Triton kernel's launcher loads its cubin, embedded in the library, from memory
        "cudaLibraryLoadData",
        "cudaLibraryGetKernel",
    }
)
# C, C++ and compiler-support imports of ordinary host code (exact names).
ALLOWED_LIBC = frozenset(
    {
        "_ITM_deregisterTMCloneTable",
        "_ITM_registerTMCloneTable",
        "__gmon_start__",
        "__cxa_finalize",
        "__cxa_atexit",
        "__cxa_thread_atexit_impl",
        "__cxa_guard_acquire",
        "__cxa_guard_release",
        "__cxa_guard_abort",
        "__cxa_allocate_exception",
        "__cxa_free_exception",
        "__cxa_throw",
        "__cxa_begin_catch",
        "__cxa_end_catch",
        "__cxa_rethrow",
        "__cxa_pure_virtual",
        "__gxx_personality_v0",
        "_Unwind_Resume",
        "__tls_get_addr",
        "__stack_chk_fail",
        "__assert_fail",
        "abort",
        "malloc",
        "calloc",
        "realloc",
        "free",
        "memcpy",
        "memmove",
        "memset",
        "memcmp",
        "memchr",
        "strlen",
        "strcmp",
        "strncmp",
        "printf",
        "fprintf",
        "puts",
        "putchar",
        "fputs",
        "fputc",
        "fwrite",
        "fflush",
        "snprintf",
        "vsnprintf",
        "stderr",
        "stdout",
        "__printf_chk",
        "__fprintf_chk",
        "__snprintf_chk",
        "__vsnprintf_chk",
        "__memcpy_chk",
        "__memset_chk",
    }
)
# Patterns: libstdc++ iostream/exception helpers, operator new/delete, libgcc arithmetic, libm.
ALLOWED_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"^_Zn[wa]m",  # operator new / new[]
        r"^_Zd[la]Pv",  # operator delete / delete[]
        r"^_ZSt\d+__throw_\w+",  # std::__throw_bad_alloc() and friends
        r"^_ZSt9terminatev$",
        r"^_ZNSo",  # std::ostream members
        r"^_ZNSt8ios_base4Init",
        # GCC 13's libstdc++ initialises the standard streams through this function instead of a
        # static ios_base::Init (seen on the H200 host: CUTLASS headers include <iostream>)
        r"^_ZSt21ios_base_library_initv$",
        r"^_ZNKSt5ctypeIcE",
        r"^_ZSt16__ostream_insert",
        r"^_ZSt4(?:cerr|cout|clog)$",
        r"^_ZSt4endl",
        r"^_ZNSt9exceptionD",
        r"^_ZTV|^_ZTI|^_ZTS",  # vtables and typeinfo
        r"^__(?:u?div|u?mod|mul|ashl|ashr|lshr)[a-z]i3$",  # libgcc 128-bit arithmetic
        r"^(?:sqrt|exp|exp2|log|log2|pow|ceil|floor|fabs|fmin|fmax|round|ldexp|frexp)f?$",
    )
)
# Named for a specific message; these are outside the allow-list anyway.
FORBIDDEN_SYMBOLS = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"^cublas|^cublasLt|^cudnn", "a vendor GEMM library"),
        (r"^dl(?:open|sym|vsym|mopen|close|error)$", "dynamic loading"),
        (r"^pthread_create$|^_ZNSt6thread", "host threads"),
        (r"^(?:v?fork|clone|system|popen|posix_spawnp?|exec\w*)$", "processes"),
        (r"^(?:socket|connect|bind|listen|accept|sendmsg|recvmsg)$", "sockets"),
        (r"^(?:fopen\w*|open\w*|creat\w*|__open\w*)$", "files"),
        (r"^(?:secure_)?getenv$|^environ$|^setenv$", "the environment"),
        (r"^cu(?:da)?(?:Stream|Event|Graph)\w*", "streams, events or graphs"),
        (r"^cu(?:da)?\w*Synchroni[sz]e$", "synchronisation"),
        (r"^cu(?:da)?(?:Malloc|Free|MemAlloc|MemFree|HostAlloc)\w*", "allocation"),
        (r"^cu(?:da)?(?:Device|Ctx)SetLimit$|^cudaCtxResetPersistingL2Cache$", "device limits"),
    )
)
# What the statically linked CUDA runtime (nvcc 13's default) imports by itself; found with nm on
# a trivial kernel. Only tolerated with allow_static_runtime=True.
STATIC_RUNTIME_IMPORTS = frozenset(
    [
        "__errno_location",
        "__fxstat",
        "__getdelim",
        "__xstat",
        "bind",
        "calloc",
        "chmod",
        "clock_gettime",
        "close",
        "closedir",
        "connect",
        "dlclose",
        "dlerror",
        "dlmopen",
        "dlopen",
        "dlsym",
        "dlvsym",
        "fchmod",
        "fclose",
        "fcntl",
        "fdopen",
        "feof",
        "ferror",
        "fflush",
        "fgetc",
        "fileno",
        "fopen",
        "fread",
        "free",
        "fscanf",
        "fseek",
        "ftell",
        "ftruncate",
        "fwrite",
        "get_nprocs",
        "getcwd",
        "getegid",
        "getenv",
        "geteuid",
        "gethostname",
        "getpid",
        "gettimeofday",
        "getuid",
        "gnu_get_libc_version",
        "kill",
        "listen",
        "localtime_r",
        "lseek",
        "madvise",
        "malloc",
        "memcmp",
        "memcpy",
        "memmove",
        "memset",
        "mkdir",
        "mkfifo",
        "mmap",
        "mprotect",
        "munmap",
        "nanosleep",
        "nftw",
        "open",
        "opendir",
        "pipe",
        "poll",
        "pthread_cond_broadcast",
        "pthread_cond_destroy",
        "pthread_cond_init",
        "pthread_cond_signal",
        "pthread_cond_timedwait",
        "pthread_cond_wait",
        "pthread_condattr_init",
        "pthread_condattr_setpshared",
        "pthread_create",
        "pthread_detach",
        "pthread_getspecific",
        "pthread_join",
        "pthread_key_create",
        "pthread_key_delete",
        "pthread_kill",
        "pthread_mutex_destroy",
        "pthread_mutex_init",
        "pthread_mutex_lock",
        "pthread_mutex_trylock",
        "pthread_mutex_unlock",
        "pthread_mutexattr_destroy",
        "pthread_mutexattr_init",
        "pthread_mutexattr_setpshared",
        "pthread_mutexattr_settype",
        "pthread_once",
        "pthread_rwlock_destroy",
        "pthread_rwlock_init",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_timedrdlock",
        "pthread_rwlock_timedwrlock",
        "pthread_rwlock_tryrdlock",
        "pthread_rwlock_trywrlock",
        "pthread_rwlock_unlock",
        "pthread_rwlock_wrlock",
        "pthread_rwlockattr_destroy",
        "pthread_rwlockattr_init",
        "pthread_rwlockattr_setpshared",
        "pthread_self",
        "pthread_setspecific",
        "pthread_spin_destroy",
        "pthread_spin_init",
        "pthread_spin_lock",
        "pthread_spin_trylock",
        "pthread_spin_unlock",
        "read",
        "readdir",
        "realloc",
        "realpath",
        "recvmsg",
        "remove",
        "rmdir",
        "sched_yield",
        "sem_destroy",
        "sem_init",
        "sem_post",
        "sem_timedwait",
        "sem_trywait",
        "sem_wait",
        "sendmsg",
        "setenv",
        "setsockopt",
        "shm_open",
        "shm_unlink",
        "shmat",
        "shmctl",
        "shmdt",
        "shmget",
        "snprintf",
        "socket",
        "socketpair",
        "sscanf",
        "strcpy",
        "strdup",
        "strlen",
        "strncat",
        "strncmp",
        "strncpy",
        "strstr",
        "strtol",
        "strtoul",
        "syscall",
        "sysconf",
        "sysinfo",
        "time",
        "uname",
        "unlink",
        "usleep",
        "vsnprintf",
        "write",
    ]
)
SHARED_RUNTIME_MARKER = "__cudaRegisterFatBinary"  # imported only when cudart is a shared library


def symbol_allowed(name: str) -> bool:
    return (
        name in ALLOWED_RUNTIME
        or name in ALLOWED_LIBC
        or any(pattern.match(name) for pattern in ALLOWED_PATTERNS)
    )


def symbol_verdict(name: str) -> str:
    """Why ``name`` (an import outside the allow-list) is rejected."""
    for pattern, why in FORBIDDEN_SYMBOLS:
        if pattern.match(name):
            return f"imports {name} ({why})"
    return f"imports {name}, which is not on the symbol allow-list"


def parse_nm(output: str) -> list[str]:
    """Undefined symbol names from ``nm -D --undefined-only`` output, version suffixes removed."""
    names = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] in ("U", "w", "v"):
            names.append(parts[-1].split("@", 1)[0])
    return names


def library_imports(library: Path, *, nm: str = "nm") -> list[str] | str:
    """The library's undefined dynamic symbols, or an error message when nm fails."""
    result = processes.run([nm, "-D", "--undefined-only", library], timeout=processes.Timeout.PROBE)
    if not result.ok:
        return f"nm failed on {Path(library).name}: {(result.stderr or result.stdout).strip()}"
    return parse_nm(result.stdout)


def check_imports(imports: Sequence[str], *, allow_static_runtime: bool = False) -> StaticResult:
    """The allow-list verdict on a list of imported symbol names (pure)."""
    names = set(imports)
    notes: list[str] = []
    if SHARED_RUNTIME_MARKER not in names:
        if not allow_static_runtime:
            return StaticResult.from_findings(
                [
                    Finding(
                        SYMBOLS,
                        "links the CUDA runtime statically: its own imports hide the "
                        "candidate's; build with static_checks.candidate_flags()",
                        None,
                        "static cudart",
                    )
                ]
            )
        names -= STATIC_RUNTIME_IMPORTS
        notes.append(
            "static CUDA runtime: the runtime's own imports (dlopen, pthread_create, socket, "
            "getenv, …) were tolerated and runtime API calls are invisible"
        )
    findings = [
        Finding(SYMBOLS, symbol_verdict(name), None, name)
        for name in sorted(names)
        if not symbol_allowed(name)
    ]
    return StaticResult.from_findings(findings, notes)


def check_library(
    library: Path, *, allow_static_runtime: bool = False, nm: str = "nm"
) -> StaticResult:
    """``nm -D --undefined-only`` on ``library`` against the allow-list."""
    imports = library_imports(Path(library), nm=nm)
    if isinstance(imports, str):
        return StaticResult.from_findings([Finding(SYMBOLS, imports)])
    return check_imports(imports, allow_static_runtime=allow_static_runtime)


def check_candidate(
    source: str, library: Path | None = None, *, allow_static_runtime: bool = False
) -> StaticResult:
    """The gate: the source checks, then (when a built library is given) the symbol checks.

    Call it with the source alone before compiling, and with the library after.
    """
    verdict = check_source(source)
    if not verdict.ok or library is None:
        return verdict
    return check_library(library, allow_static_runtime=allow_static_runtime)


# --------------------------------------------------------------------------------------------
# Building candidates so that the symbol check sees their imports


def candidate_flags(nvcc: str = "nvcc") -> tuple[str, ...]:
    """Extra nvcc flags for candidate builds: the shared CUDA runtime (found through an rpath to
    the toolkit that built it), so that ``nm -D`` lists the candidate's own imports."""
    flags: tuple[str, ...] = ("-cudart", "shared")
    folder = cuda_library_dir(nvcc)
    if folder is not None:
        flags += (f"-Xlinker=-rpath={folder}",)
    return flags
