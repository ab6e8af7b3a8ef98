"""gemmforge kernel bundle: the fastest verified HGEMM kernel per shape, as PyTorch ops.

    import gemmforge_bundle            # registers torch.ops.gemmforge.hgemm / hgemm_linear
    c = torch.ops.gemmforge.hgemm(a, b)          # a (M, K) @ b (K, N), fp16, CUDA, contiguous
    y = torch.ops.gemmforge.hgemm_linear(x, w)   # x (..., K) @ w.T with w (N, K), as nn.Linear
    c = gemmforge_bundle.matmul(a, b)            # the same, with less host time a call (the
    y = gemmforge_bundle.linear(x, w)            # ops from pybind11, not torch.ops' binding)

Each (N, K) has, for ranges of M, one of the bundle's kernels or cuBLASLt with the algorithm its
autotuning pinned, whichever was faster; anything else (another M, dtype, stride, device, GPU
architecture, cuBLASLt version) falls back to torch.matmul. Build once with
``python -m gemmforge_bundle.build`` (the kernels, the cuBLASLt shim and the C++ ops); check
them on your GPU with ``python -m gemmforge_bundle.verify``.
"""

from gemmforge_bundle._ops import (
    bucket_table,
    dispatch_table,
    hgemm,
    hgemm_linear,
    kernel_for,
    linear,
    matmul,
)

__all__ = [
    "bucket_table",
    "dispatch_table",
    "hgemm",
    "hgemm_linear",
    "kernel_for",
    "linear",
    "matmul",
]
