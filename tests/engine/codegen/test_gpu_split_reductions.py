"""The fused split-K reductions on a real GPU (sm80 family, ``reduction="pdl"`` and
``"cluster"``): each passes the verifier, and each gives bitwise the result of the two-kernel
reduction on the same inputs (the same partials, summed in the same order). Skipped without a
GPU."""

from __future__ import annotations

import pytest

from engine.codegen import Sm80Config
from engine.problem import Layout, Problem
from engine.verify.verifier import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

TILE = {"tile_m": 32, "tile_n": 64, "tile_k": 64, "warp_m": 1, "warp_n": 2, "stages": 4}
REDUCTIONS = ("kernel", "pdl", "cluster")
SPLITS = (8, 16)  # 16 CTAs is a non-portable cluster size
PROBLEMS = (Problem(128, 128, 8192), Problem(200, 264, 3000))  # the second has M, N, K residues


def config(reduction: str, splits: int) -> Sm80Config:
    return Sm80Config(layout=Layout.NN, splits=splits, reduction=reduction, **TILE)


@pytest.fixture(scope="module")
def libraries() -> dict[tuple[str, int], str]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    configs = [config(r, s) for r in REDUCTIONS for s in SPLITS]
    built = compile_configs(configs, target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {(c.reduction, c.splits): b.library for c, b in zip(configs, built, strict=True)}


def run(library: str, a, b, problem: Problem):
    import torch

    from engine.gpu.runtime import KernelLibrary

    kernel = KernelLibrary(library)
    c = torch.full((problem.m, problem.n), float("nan"), dtype=torch.float16, device="cuda")
    size = kernel.workspace_size(problem.m, problem.n, problem.k)
    workspace = torch.full((max(size, 4) // 4,), float("nan"), device="cuda")  # poisoned
    stream = torch.cuda.current_stream()
    error = kernel.launch(
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        problem.m,
        problem.n,
        problem.k,
        workspace.data_ptr() if size else 0,
        stream.cuda_stream,
    )
    stream.synchronize()
    assert error == 0, f"{library}: cudaError {error}"
    return c, size


@pytest.mark.parametrize("reduction", ["pdl", "cluster"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_the_fused_reductions_pass_the_verifier(libraries, reduction, problem, verifier_sandboxes):
    for splits in SPLITS:
        result = verify(libraries[(reduction, splits)], problem)
        verifier_sandboxes.assert_all_sandboxed()
        assert result.ok, (reduction, splits, result.reason, result.message, result.stderr_tail)


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_the_fused_reductions_give_bitwise_the_two_kernel_result(libraries, problem):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(problem.k)
    a = torch.randn(problem.m, problem.k, device="cuda", generator=generator).half()
    b = torch.randn(problem.k, problem.n, device="cuda", generator=generator).half()
    reference = (a.float() @ b.float()).half()
    for splits in SPLITS:
        two_kernels, workspace = run(libraries[("kernel", splits)], a, b, problem)
        assert workspace > 0
        torch.testing.assert_close(two_kernels, reference, rtol=2e-2, atol=2e-2)
        for reduction in ("pdl", "cluster"):
            fused, fused_workspace = run(libraries[(reduction, splits)], a, b, problem)
            assert torch.equal(fused, two_kernels), (reduction, splits)
            assert fused_workspace == (0 if reduction == "cluster" else workspace)
