"""gemmforge kernel bundle: the fastest verified HGEMM kernel per shape, as PyTorch ops.

    import gemmforge_bundle            # registers torch.ops.gemmforge.hgemm / hgemm_linear
    c = torch.ops.gemmforge.hgemm(a, b)          # a (M, K) @ b (K, N), fp16, CUDA, contiguous
    y = torch.ops.gemmforge.hgemm_linear(x, w)   # x (M, K) @ w.T with w (N, K), as nn.Linear

Shapes the bundle has no kernel for fall back to torch.matmul. Build the kernels once with
``python -m gemmforge_bundle.build``; check them on your GPU with
``python -m gemmforge_bundle.verify``.
"""

from gemmforge_bundle._ops import dispatch_table, hgemm, hgemm_linear, kernel_for

__all__ = ["dispatch_table", "hgemm", "hgemm_linear", "kernel_for"]
