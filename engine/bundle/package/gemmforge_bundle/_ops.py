"""The ops. Kernels are shared libraries with gemmforge's C ABI, launched through ctypes on the
caller's current stream: no host syncs and no allocations besides the output and (when a kernel
needs one) its workspace, both from PyTorch's caching allocator, so the ops work under
torch.compile and CUDA-graph capture (call each shape once before capturing, to load its kernel).

Why a Python-registered op over a C++ extension: no build against PyTorch's C++ ABI (the same
bundle works with any torch >= 2.4), and a ctypes call costs ~1 µs of host time.
"""

from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path
from typing import Any

import torch

PACKAGE = Path(__file__).resolve().parent
MANIFEST = PACKAGE / "kernels.json"
LIB_DIR = PACKAGE / "lib"
_VOIDP, _INT = ctypes.c_void_p, ctypes.c_int
_lock = threading.Lock()
_loaded: dict[str, tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]] = {}


def dispatch_table() -> dict[tuple[int, int, int, str], str]:
    """(M, N, K, layout) → kernel name, from the bundle's manifest."""
    entries = json.loads(MANIFEST.read_text())["kernels"]
    return {(e["m"], e["n"], e["k"], e["layout"]): e["name"] for e in entries}


_TABLE = dispatch_table()


def kernel_for(m: int, n: int, k: int, layout: str) -> str | None:
    return _TABLE.get((m, n, k, layout))


def _load(name: str) -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]:
    with _lock:
        if name not in _loaded:
            path = LIB_DIR / f"{name}.so"
            if not path.exists():
                raise RuntimeError(
                    f"gemmforge: kernel {name} is not built; run `python -m gemmforge_bundle.build`"
                )
            lib = ctypes.CDLL(str(path))
            launch = lib.gemmforge_hgemm
            launch.restype = _INT
            launch.argtypes = [_VOIDP, _VOIDP, _VOIDP, _INT, _INT, _INT, _VOIDP, _VOIDP]
            workspace = lib.gemmforge_workspace_size
            workspace.restype = ctypes.c_size_t
            workspace.argtypes = [_INT, _INT, _INT]
            _loaded[name] = (launch, workspace)
        return _loaded[name]


def _check(name: str, a: torch.Tensor, b: torch.Tensor, b_rows_are_k: bool) -> tuple[int, int, int]:
    for label, t in (("first operand", a), ("second operand", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gemmforge.{name}: {label} must be a torch.Tensor")
        if not t.is_cuda:
            raise RuntimeError(
                f"gemmforge.{name} needs CUDA tensors (got {label} on {t.device}); "
                "the bundle's kernels run on NVIDIA GPUs only"
            )
        if t.dtype != torch.float16:
            raise TypeError(f"gemmforge.{name}: {label} must be float16, got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"gemmforge.{name}: {label} must be 2-D, got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"gemmforge.{name}: {label} must be contiguous (call .contiguous())")
    if a.device != b.device:
        raise ValueError(f"gemmforge.{name}: operands on {a.device} and {b.device}")
    m, k = a.shape
    n = b.shape[1] if b_rows_are_k else b.shape[0]
    k_b = b.shape[0] if b_rows_are_k else b.shape[1]
    if k_b != k:
        raise ValueError(
            f"gemmforge.{name}: inner sizes differ ({tuple(a.shape)} and {tuple(b.shape)})"
        )
    return m, n, k


def _run(a: torch.Tensor, b: torch.Tensor, m: int, n: int, k: int, layout: str) -> torch.Tensor:
    name = kernel_for(m, n, k, layout)
    if name is None:
        return a @ b if layout == "nn" else a @ b.t()
    launch, workspace_size = _load(name)
    c = torch.empty((m, n), dtype=torch.float16, device=a.device)
    size = int(workspace_size(m, n, k))
    workspace = torch.empty(size, dtype=torch.uint8, device=a.device) if size else None
    stream = torch.cuda.current_stream(a.device).cuda_stream
    status = launch(
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        m,
        n,
        k,
        workspace.data_ptr() if workspace is not None else None,
        stream,
    )
    if status != 0:
        raise RuntimeError(f"gemmforge: kernel {name} failed to launch (CUDA error {status})")
    return c


@torch.library.custom_op("gemmforge::hgemm", mutates_args=())
def hgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A·B with A (M, K) and B (K, N), fp16 with fp32 accumulation."""
    m, n, k = _check("hgemm", a, b, b_rows_are_k=True)
    return _run(a, b, m, n, k, "nn")


@torch.library.custom_op("gemmforge::hgemm_linear", mutates_args=())
def hgemm_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Y = X·Wᵀ with X (M, K) and W (N, K), nn.Linear's weight layout (no bias)."""
    m, n, k = _check("hgemm_linear", x, w, b_rows_are_k=False)
    return _run(x, w, m, n, k, "tn")


@hgemm.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[1]))


@hgemm_linear.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[0]))


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
    """Y = X·Wᵀ: dX = dY·W, dW = dYᵀ·X."""
    x, w = ctx.saved_tensors
    grad_x = grad @ w if ctx.needs_input_grad[0] else None
    grad_w = grad.t() @ x if ctx.needs_input_grad[1] else None
    return grad_x, grad_w


hgemm.register_autograd(hgemm_backward, setup_context=_save_operands)
hgemm_linear.register_autograd(hgemm_linear_backward, setup_context=_save_operands)
