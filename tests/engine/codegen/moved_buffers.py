"""One kernel launched on buffers that move under it, for the GPU tests of launchers that keep
state between calls (TMA descriptors re-pointed at new buffers rather than encoded again): every
call must still write its own C from its own A and B, whether the buffers rotate, return to an
earlier set, or the problem changes in between."""

from __future__ import annotations

from engine.codegen.base import KernelConfig
from engine.problem import Layout, Problem


def operands(problem: Problem, seed: int):
    """Fresh random A and B (B also as stored for the layout) and a C that starts as NaN."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(problem.m, problem.k, device="cuda", generator=generator).half()
    b = torch.randn(problem.k, problem.n, device="cuda", generator=generator).half()
    stored_b = b if problem.layout is Layout.NN else b.t().contiguous()
    c = torch.full((problem.m, problem.n), float("nan"), dtype=torch.float16, device="cuda")
    return a, b, stored_b, c


def assert_each_call_writes_its_own_product(
    config: KernelConfig, library: str, big: Problem, small: Problem
) -> None:
    """Launch ``config``'s kernel, built at ``library``, on three buffer sets of each problem (both
    valid for it): rotate, return to an earlier set, change the problem and come back; compare
    each C with an fp32 reference."""
    import torch

    from engine.gpu.runtime import KernelLibrary

    for problem in (big, small):
        assert config.is_valid(problem), (problem, config.is_valid(problem).reason)

    kernel = KernelLibrary(library)
    stream = torch.cuda.current_stream()
    sets = {p: [operands(p, seed) for seed in range(3)] for p in (big, small)}
    order = [(big, 0), (big, 1), (big, 2), (big, 0), (small, 1), (big, 1), (big, 1), (small, 2)]
    for problem, index in order:
        a, b, stored_b, c = sets[problem][index]
        c.fill_(float("nan"))
        workspace = torch.zeros(
            max(kernel.workspace_size(problem.m, problem.n, problem.k), 1),
            dtype=torch.uint8,
            device="cuda",
        )
        error = kernel.launch(
            a.data_ptr(),
            stored_b.data_ptr(),
            c.data_ptr(),
            problem.m,
            problem.n,
            problem.k,
            workspace.data_ptr(),
            stream.cuda_stream,
        )
        stream.synchronize()
        assert error == 0, (problem, index, error)
        reference = (a.float() @ b.float()).half()
        torch.testing.assert_close(c, reference, atol=0.06, rtol=0.02, msg=f"{problem} set {index}")
