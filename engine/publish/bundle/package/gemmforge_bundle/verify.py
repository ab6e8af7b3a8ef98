"""Re-checks every bundled kernel on this machine's GPU: correctness against an fp32 reference
(tolerance: 2× torch.matmul's own error on the same inputs) and speed against torch.matmul
(CUDA events, L2 flushed, median). ``python -m gemmforge_bundle.verify``; exits 1 on a failure."""

from __future__ import annotations

import functools
import sys

import torch

from gemmforge_bundle._ops import dispatch_table, hgemm, hgemm_linear


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def median_ms(fn, flush: torch.Tensor, reps: int = 50) -> float:
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> int:
    if not torch.cuda.is_available():
        print("error: the bundle's kernels need an NVIDIA GPU with CUDA", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    failures = 0
    print(f"{'shape':>22} {'rel err':>9} {'tol':>9} {'kernel µs':>10} {'torch µs':>10} speedup")
    for (m, n, k, layout), _name in sorted(dispatch_table().items()):
        a = torch.randn(m, k, dtype=torch.float16, device="cuda")
        b = torch.randn(*((k, n) if layout == "nn" else (n, k)), dtype=torch.float16, device="cuda")
        op = hgemm if layout == "nn" else hgemm_linear
        ref = a.float() @ (b.float() if layout == "nn" else b.float().t())
        torch_out = a @ (b if layout == "nn" else b.t())
        tol = max(2 * rel_error(torch_out, ref), 1e-5)
        err = rel_error(op(a, b), ref)
        b_op = b if layout == "nn" else b.t()
        ours = median_ms(functools.partial(op, a, b), flush) * 1e3
        theirs = median_ms(functools.partial(torch.matmul, a, b_op), flush) * 1e3
        ok = err <= tol
        failures += not ok
        print(
            f"{f'{m}x{n}x{k}_{layout}':>22} {err:9.2e} {tol:9.2e} {ours:10.2f} {theirs:10.2f} "
            f"{theirs / ours:6.3f}x {'' if ok else 'WRONG'}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
