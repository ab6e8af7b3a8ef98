"""The ops. Kernels are shared libraries with gemmforge's C ABI, launched through ctypes on the
caller's current stream: no host syncs and no allocations besides the output and (when a kernel
needs one) its workspace, both from PyTorch's caching allocator, so the ops work under
torch.compile and CUDA-graph capture (call each shape once before capturing, to load its kernel).

Two registrations of the same ops: built (``python -m gemmforge_bundle.build``), the C++
extension ``lib/gemmforge_ops.so`` defines them with TORCH_LIBRARY (csrc/ops.cpp), so an eager call
costs the dispatcher's host time and no Python; without it (or with GEMMFORGE_PYTHON_OPS=1) they
are Python custom ops launching the libraries through ctypes, and ``matmul``/``linear`` skip the
dispatcher in eager inference. Either way the fake kernels torch.compile needs are Python's.

Dispatch: per (N, K, layout) the manifest lists M ranges, each served by the choice measured at
a representative M inside it (engine.publish.bundle.buckets chose the ranges): one of the
bundle's kernels, or cuBLASLt running the algorithm its autotuning pinned for that shape
(``kind: cublaslt``, through the shim lib/gemmforge_cublaslt.so, re-checked with
cublasLtMatmulAlgoCheck at each new M). Anything a choice cannot take falls back to torch.matmul:
an M outside every range, another dtype, a non-contiguous or misaligned operand, a CPU tensor, a
GPU whose architecture the kernel was not built for, a driver older than the CUDA the kernels
were built with, a pinned algorithm on another GPU or cuBLASLt version or one cuBLASLt rejects
(one warning per process for these, and for a library that is missing or does not load).
"""

from __future__ import annotations

import bisect
import ctypes
import importlib.util
import itertools
import json
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

PACKAGE = Path(__file__).resolve().parent
MANIFEST = PACKAGE / "kernels.json"
LIB_DIR = PACKAGE / "lib"
BUILD_INFO = LIB_DIR / "build.json"  # written by gemmforge_bundle.build: the nvcc CUDA version
EXTENSION = LIB_DIR / "gemmforge_ops.so"  # the ops registered from C++ (csrc/ops.cpp)
DIRECT = LIB_DIR / "gemmforge_direct.so"  # a pybind11 entry into those ops (csrc/direct.cpp)
SHIM = LIB_DIR / "gemmforge_cublaslt.so"  # cuBLASLt with a pinned algorithm (csrc/cublaslt_shim.cu)
CUBLASLT = "cublaslt"  # a manifest entry's kind when cuBLASLt's pinned algorithm serves it
ALIGNMENT = 16  # bytes: the kernels load operands with 16-byte vector copies (cp.async, TMA)
# CUDA runtime errors that mean "this kernel cannot run here" and leave nothing half-done:
# insufficient driver, no kernel image for the device, unsupported PTX, driver mismatch,
# forward compatibility not supported on this device.
CANNOT_RUN_HERE = frozenset({35, 209, 222, 803, 804})
_VOIDP, _INT = ctypes.c_void_p, ctypes.c_int
_lock = threading.Lock()
_loaded: dict[str, tuple[Callable[..., int], Callable[..., int]] | None] = {}
_usable: dict[tuple[str, int], bool] = {}
_workspace: dict[tuple[str, int, int, int], int] = {}
_lt_plans: dict[tuple[str, int], tuple[int, int]] = {}  # (entry, M) → (shim plan, workspace)
_shim: Any = None
_warned = False


@dataclass(frozen=True)
class Bucket:
    """Ms in [lo, hi] (inclusive) go to ``name``, the kernel measured at M = ``m``."""

    lo: int
    hi: int
    m: int
    name: str
    archs: tuple[str, ...]
    kind: str = "kernel"  # or CUBLASLT
    algo: tuple[int, ...] = ()  # CUBLASLT: the pinned cublasLtMatmulAlgoConfigAttributes_t values


def _manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def _entries() -> list[dict[str, Any]]:
    return _manifest()["kernels"]


def pinned_on() -> tuple[str, int]:
    """The GPU and cuBLASLt version (cublasLtGetVersion) the cuBLASLt algorithms were pinned on
    ("" and 0 where the campaign did not record them)."""
    pinned = _manifest().get("cublaslt") or {}
    version = str(pinned.get("version") or "")
    return str(pinned.get("gpu_name") or ""), int(version) if version.isdigit() else 0


def dispatch_table() -> dict[tuple[int, int, int, str], str]:
    """(measured M, N, K, layout) → kernel name, from the bundle's manifest."""
    return {(e["m"], e["n"], e["k"], e["layout"]): e["name"] for e in _entries()}


def bucket_table(entries: list[dict[str, Any]] | None = None) -> dict[tuple[int, int, str], list]:
    """(N, K, layout) → its buckets sorted by M (a manifest without ranges: exact Ms)."""
    table: dict[tuple[int, int, str], list[Bucket]] = {}
    for e in _entries() if entries is None else entries:
        bucket = Bucket(
            lo=int(e.get("m_lo", e["m"])),
            hi=int(e.get("m_hi", e["m"])),
            m=int(e["m"]),
            name=e["name"],
            archs=tuple(e.get("archs", ())),
            kind=e.get("kind", "kernel"),
            algo=tuple(int(v) for v in e.get("algo", ())),
        )
        table.setdefault((e["n"], e["k"], e["layout"]), []).append(bucket)
    for buckets in table.values():
        buckets.sort(key=lambda b: b.lo)
        for left, right in itertools.pairwise(buckets):
            if right.lo <= left.hi:
                raise ValueError(f"overlapping M ranges in the manifest: {left} and {right}")
    return table


_TABLE = bucket_table()
_STARTS = {key: [b.lo for b in buckets] for key, buckets in _TABLE.items()}


def bucket_for(m: int, n: int, k: int, layout: str) -> Bucket | None:
    buckets = _TABLE.get((n, k, layout))
    if buckets is None:
        return None
    i = bisect.bisect_right(_STARTS[(n, k, layout)], m) - 1
    if i < 0 or m > buckets[i].hi:
        return None
    return buckets[i]


def kernel_for(m: int, n: int, k: int, layout: str) -> str | None:
    bucket = bucket_for(m, n, k, layout)
    return bucket.name if bucket else None


# -- guards -------------------------------------------------------------------------------------
def arch_runs(arch: str, capability: tuple[int, int]) -> bool:
    """Whether a cubin built for ``arch`` (sm_XY or sm_XYa, no PTX) runs on a GPU of compute
    capability ``capability``: an arch-specific target (sm_90a) only on that exact GPU; a plain
    target on the same major version with an equal or newer minor one (binary compatibility)."""
    number = arch.removeprefix("sm_").removeprefix("compute_")
    specific = number.endswith("a")
    digits = number.rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        return False
    major, minor = int(digits[:-1]), int(digits[-1])
    if specific:
        return capability == (major, minor)
    return capability[0] == major and capability[1] >= minor


def _capability(device: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def _driver_version() -> int | None:
    """The driver's CUDA version as 1000·major + 10·minor (cuDriverGetVersion), or None."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return int(version.value)


def _built_cuda_version() -> int | None:
    """The CUDA version the kernels were built with (gemmforge_bundle.build records it)."""
    try:
        return int(json.loads(BUILD_INFO.read_text())["cuda_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cannot_run(
    archs: tuple[str, ...], capability: tuple[int, int], driver: int | None, built: int | None
) -> str | None:
    """Why a kernel built for ``archs`` with CUDA ``built`` cannot run on a GPU of
    ``capability`` under a driver of CUDA ``driver``; None when it can (unknown versions pass:
    the launch status then says)."""
    if archs and not any(arch_runs(a, capability) for a in archs):
        return f"built for {', '.join(archs)}, this GPU is sm_{capability[0]}{capability[1]}"
    if driver is not None and built is not None and driver < built:
        return (
            f"built with CUDA {built // 1000}.{built % 1000 // 10}, the driver supports "
            f"CUDA {driver // 1000}.{driver % 1000 // 10}"
        )
    return None


def lt_mismatch(pinned: tuple[str, int], gpu: str, version: int | None) -> str | None:
    """Why an algorithm pinned on ``pinned`` (GPU name, cuBLASLt version) is not used on ``gpu``
    under cuBLASLt ``version``; None when it may be (cublasLtMatmulAlgoCheck has the last word)."""
    pinned_gpu, pinned_version = pinned
    if pinned_gpu and pinned_gpu != gpu:
        return f"cuBLASLt algorithm pinned on {pinned_gpu}, this GPU is {gpu}"
    if pinned_version and version is not None and version != pinned_version:
        return (
            f"cuBLASLt algorithm pinned under cuBLASLt {pinned_version}, this is cuBLASLt {version}"
        )
    return None


def _gpu_name(device: int) -> str:
    return torch.cuda.get_device_name(device)


def _load_shim() -> Any:
    """The cuBLASLt shim, loaded once; None when it is not built or does not load."""
    global _shim
    if _shim is None:
        with _lock:
            if _shim is None:
                try:
                    lib = ctypes.CDLL(str(SHIM))
                except OSError:
                    _shim = False
                    return None
                lib.gemmforge_lt_version.restype = ctypes.c_size_t
                lib.gemmforge_lt_prepare.restype = _INT
                lib.gemmforge_lt_prepare.argtypes = [
                    *(_INT,) * 4,
                    ctypes.POINTER(ctypes.c_int64),
                    _INT,
                    ctypes.POINTER(ctypes.c_size_t),
                ]
                lib.gemmforge_lt_hgemm.restype = _INT
                lib.gemmforge_lt_hgemm.argtypes = [_INT, _VOIDP, _VOIDP, _VOIDP, _VOIDP, _VOIDP]
                _shim = lib
    return _shim or None


def _lt_reason(device: int) -> str | None:
    shim = _load_shim()
    if shim is None:
        return "the cuBLASLt shim is not built or does not load: run the bundle's build"
    return lt_mismatch(pinned_on(), _gpu_name(device), int(shim.gemmforge_lt_version()))


def _fallback_warning(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"gemmforge: falling back to torch.matmul ({reason}); further fallbacks are silent",
            RuntimeWarning,
            stacklevel=4,
        )


def usable(bucket: Bucket, device: int) -> bool:
    """Whether ``bucket``'s kernel can run on CUDA device ``device`` (checked once, cached)."""
    key = (bucket.name, device)
    ok = _usable.get(key)
    if ok is None:
        reason = cannot_run(
            bucket.archs, _capability(device), _driver_version(), _built_cuda_version()
        )
        if reason is None and bucket.kind == CUBLASLT:
            reason = _lt_reason(device)
        elif reason is None and _load(bucket.name) is None:
            reason = (
                f"kernel {bucket.name} is not built or does not load: run "
                "`python -m gemmforge_bundle.build`"
            )
        if reason is not None:
            _fallback_warning(f"kernel {bucket.name}: {reason}")
        ok = _usable[key] = reason is None
    return ok


def _load(name: str) -> tuple[Callable[..., int], Callable[..., int]] | None:
    if name in _loaded:  # the per-call path: no lock once loaded
        return _loaded[name]
    with _lock:
        if name not in _loaded:
            path = LIB_DIR / f"{name}.so"
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                _loaded[name] = None
                return None
            launch = lib.gemmforge_hgemm
            launch.restype = _INT
            launch.argtypes = [_VOIDP, _VOIDP, _VOIDP, _INT, _INT, _INT, _VOIDP, _VOIDP]
            workspace = lib.gemmforge_workspace_size
            workspace.restype = ctypes.c_size_t
            workspace.argtypes = [_INT, _INT, _INT]
            _loaded[name] = (launch, workspace)
        return _loaded[name]


def _takes(t: torch.Tensor) -> bool:
    """An operand the kernels take: fp16, 2-D, row-major contiguous, 16-byte aligned."""
    return (
        t.dtype == torch.float16
        and t.dim() == 2
        and t.is_contiguous()
        and t.data_ptr() % ALIGNMENT == 0
    )


def operand_form(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, str] | None:
    """For C = A·B, the second operand as a kernel takes it and the layout: B row-major (NN) or
    Bᵀ row-major (TN, nn.Linear's weight); None when no kernel takes these operands."""
    if a.dim() != 2 or b.dim() != 2 or not _takes(a) or a.device != b.device:
        return None
    if b.is_contiguous():
        operand, layout = b, "nn"
    elif b.t().is_contiguous():
        operand, layout = b.t(), "tn"
    else:
        return None
    if not _takes(operand) or 0 in a.shape or 0 in b.shape or b.shape[0] != a.shape[1]:
        return None
    return operand, layout


def plan(a: torch.Tensor, b: torch.Tensor) -> tuple[Bucket, torch.Tensor, str] | None:
    """The kernel, operand and layout for C = A·B; None when torch.matmul must do it."""
    if not a.is_cuda:
        return None
    form = operand_form(a, b)
    if form is None:
        return None
    operand, layout = form
    (m, k), n = a.shape, b.shape[1]
    bucket = bucket_for(m, n, k, layout)
    if bucket is None or not usable(bucket, a.device.index or 0):
        return None
    return bucket, operand, layout


# The current stream as a raw handle, without building a torch.cuda.Stream object per call.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream(device: torch.device) -> int:
    if _RAW_STREAM is not None:
        return int(_RAW_STREAM(device.index))
    return torch.cuda.current_stream(device).cuda_stream


def _lt_plan(bucket: Bucket, m: int, n: int, k: int, layout: str) -> tuple[int, int]:
    """The shim's plan for the pinned algorithm at this M, and its workspace bytes (a negative
    plan: cuBLASLt rejected the algorithm for this problem)."""
    key = (bucket.name, m)
    known = _lt_plans.get(key)
    if known is None:
        config = (ctypes.c_int64 * len(bucket.algo))(*bucket.algo)
        workspace = ctypes.c_size_t(0)
        plan = _load_shim().gemmforge_lt_prepare(
            m, n, k, int(layout == "tn"), config, len(bucket.algo), ctypes.byref(workspace)
        )
        known = _lt_plans[key] = (int(plan), int(workspace.value))
    return known


def _launch_lt(
    bucket: Bucket, a: torch.Tensor, operand: torch.Tensor, n: int, layout: str
) -> torch.Tensor | None:
    m, k = a.shape
    plan, size = _lt_plan(bucket, m, n, k, layout)
    if plan < 0:
        _fallback_warning(f"{bucket.name}: cuBLASLt rejects the pinned algorithm at M={m}")
        return None
    c = torch.empty((m, n), dtype=torch.float16, device=a.device)
    workspace = torch.empty(size, dtype=torch.uint8, device=a.device) if size else None
    status = _load_shim().gemmforge_lt_hgemm(
        plan,
        a.data_ptr(),
        operand.data_ptr(),
        c.data_ptr(),
        workspace.data_ptr() if workspace is not None else None,
        _raw_stream(a.device),
    )
    if status != 0:
        raise RuntimeError(f"gemmforge: {bucket.name} failed (cuBLASLt status {status - 1000})")
    return c


def _launch(bucket: Bucket, a: torch.Tensor, operand: torch.Tensor, n: int) -> torch.Tensor | None:
    loaded = _load(bucket.name)
    if loaded is None:
        return None
    launch, workspace_size = loaded
    m, k = a.shape
    c = torch.empty((m, n), dtype=torch.float16, device=a.device)
    size = _workspace.get((bucket.name, m, n, k))
    if size is None:  # a ctypes call costs host time: asked once per kernel and shape
        size = _workspace[(bucket.name, m, n, k)] = int(workspace_size(m, n, k))
    workspace = torch.empty(size, dtype=torch.uint8, device=a.device) if size else None
    status = launch(
        a.data_ptr(),
        operand.data_ptr(),
        c.data_ptr(),
        m,
        n,
        k,
        workspace.data_ptr() if workspace is not None else None,
        _raw_stream(a.device),
    )
    if status in CANNOT_RUN_HERE:
        _usable[(bucket.name, a.device.index or 0)] = False
        _fallback_warning(f"kernel {bucket.name} cannot run on this GPU (CUDA error {status})")
        return None
    if status != 0:
        raise RuntimeError(
            f"gemmforge: kernel {bucket.name} failed to launch (CUDA error {status})"
        )
    return c


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A·B by the bundle's kernel when one takes it, else by torch.matmul (always a new tensor:
    a custom op may not return a view of its inputs)."""
    chosen = plan(a, b)
    if chosen is not None:
        bucket, operand, layout = chosen
        if bucket.kind == CUBLASLT:
            c = _launch_lt(bucket, a, operand, b.shape[1], layout)
        else:
            c = _launch(bucket, a, operand, b.shape[1])
        if c is not None:
            return c
    return torch.matmul(a, b)


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """X·Wᵀ with X (..., K): leading dimensions are folded into M when X is contiguous."""
    if x.dim() > 2 and x.is_contiguous():
        return _matmul(x.reshape(-1, x.shape[-1]), w.t()).reshape(*x.shape[:-1], w.shape[0])
    return _matmul(x, w.t())


def _fake_hgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)  # on fake tensors: torch.matmul's shapes, dtypes and errors


def _fake_hgemm_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x, w.t())


# Gradients go through torch.matmul: the bundle's kernels are tuned for the forward shapes only.
# Registered so that autograd and torch.compile can trace a model whose weights require grad.
def _save_operands(
    ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: torch.Tensor
) -> None:
    ctx.save_for_backward(*inputs)


def hgemm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """C = A·B: dA = dC·Bᵀ, dB = Aᵀ·dC."""
    a, b = ctx.saved_tensors
    grad_a = grad @ b.t() if ctx.needs_input_grad[0] else None
    grad_b = a.t() @ grad if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def hgemm_linear_backward(
    ctx: Any, grad: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Y = X·Wᵀ, X (..., K): dX = dY·W, dW = dYᵀ·X over the folded leading dimensions."""
    x, w = ctx.saved_tensors
    grad_x = grad @ w if ctx.needs_input_grad[0] else None
    grad_w = None
    if ctx.needs_input_grad[1]:
        grad_w = grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
    return grad_x, grad_w


def _load_warning(message: str) -> None:
    """What did not load at import, and what serves instead."""
    warnings.warn(f"gemmforge: {message}", RuntimeWarning, stacklevel=3)


def _load_extension() -> bool:
    """Loads the C++ ops (lib/gemmforge_ops.so) and hands them the dispatch table; False when
    they are not built, not wanted (GEMMFORGE_PYTHON_OPS=1) or do not load here (a CPU-only or
    another torch build: one warning, and the Python ops serve)."""
    if os.environ.get("GEMMFORGE_PYTHON_OPS") == "1" or not EXTENSION.is_file():
        return False
    try:
        torch.ops.load_library(str(EXTENSION))
    except (OSError, RuntimeError) as exc:
        _load_warning(f"the C++ ops do not load ({exc}); the Python ops serve")
        return False
    gpu, version = pinned_on()
    built = _built_cuda_version() or 0
    for (n, k, layout), buckets in _TABLE.items():
        for b in buckets:
            library = SHIM if b.kind == CUBLASLT else LIB_DIR / f"{b.name}.so"
            torch.ops.gemmforge._add_entry(
                n, k, int(layout == "tn"), b.lo, b.hi, b.m, b.name, str(library),
                ",".join(b.archs), built, list(b.algo), gpu, version,
            )  # fmt: skip
    return True


def _load_direct() -> Any:
    """The pybind11 entry into the C++ ops (lib/gemmforge_direct.so), with torch.compile told
    to trace the ops in its place; None when it is not built, does not load, or this torch
    cannot substitute for it (compiled code would break its graph at each call)."""
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    if substitute is None or not DIRECT.is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location("gemmforge_direct", DIRECT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as exc:
        _load_warning(f"the direct calls do not load ({exc}); torch.ops serves")
        return None

    def matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.gemmforge.hgemm.default(a, b)

    def linear_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.gemmforge.hgemm_linear.default(x, w)

    try:
        substitute(module.matmul, skip_signature_check=True)(matmul_op)
        substitute(module.linear, skip_signature_check=True)(linear_op)
    except (TypeError, ValueError) as exc:  # a torch whose substitution refuses a C function
        _load_warning(f"torch.compile cannot trace the direct calls ({exc}); torch.ops serves")
        return None
    return module


NATIVE = _load_extension()
if NATIVE:
    torch.library.register_fake("gemmforge::hgemm")(_fake_hgemm)
    torch.library.register_fake("gemmforge::hgemm_linear")(_fake_hgemm_linear)
    hgemm = torch.ops.gemmforge.hgemm
    hgemm_linear = torch.ops.gemmforge.hgemm_linear
    # the dispatcher in C++ does the rest: the direct calls only skip torch.ops' Python binding
    DIRECT_CALLS = _load_direct()
    matmul = DIRECT_CALLS.matmul if DIRECT_CALLS else torch.ops.gemmforge.hgemm.default
    linear = DIRECT_CALLS.linear if DIRECT_CALLS else torch.ops.gemmforge.hgemm_linear.default
else:
    DIRECT_CALLS = None

    @torch.library.custom_op("gemmforge::hgemm", mutates_args=())
    def hgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """C = A·B with A (M, K) and B (K, N), fp16 with fp32 accumulation (else torch.matmul)."""
        return _matmul(a, b)

    @torch.library.custom_op("gemmforge::hgemm_linear", mutates_args=())
    def hgemm_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Y = X·Wᵀ with X (..., K) and W (N, K), nn.Linear's weight layout (no bias)."""
        return _linear(x, w)

    hgemm.register_fake(_fake_hgemm)
    hgemm_linear.register_fake(_fake_hgemm_linear)
    hgemm.register_autograd(hgemm_backward, setup_context=_save_operands)
    hgemm_linear.register_autograd(hgemm_linear_backward, setup_context=_save_operands)

    def _needs_op(*tensors: torch.Tensor) -> bool:
        return torch.compiler.is_compiling() or (
            torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        )

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """torch.ops.gemmforge.hgemm, without the dispatcher's host time in eager inference."""
        return torch.ops.gemmforge.hgemm(a, b) if _needs_op(a, b) else _matmul(a, b)

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """torch.ops.gemmforge.hgemm_linear, without the dispatcher's host time in eager
        inference."""
        return torch.ops.gemmforge.hgemm_linear(x, w) if _needs_op(x, w) else _linear(x, w)
