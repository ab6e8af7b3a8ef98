"""The longk family (Hopper cluster split-K) on a real GPU: both layouts, swapped and not, tiles
16 to 256 wide, 1 to 16 splits, 2 to 12 stages, one CTA an SM or more, pass the verifier (fresh
random inputs against an fp32 reference) on shapes with M, N and K residues, need no workspace,
and give the same result on every run (the splits are summed in a fixed order). Skipped without
a GPU."""

from __future__ import annotations

import pytest

from engine.codegen import LongKConfig
from engine.problem import Layout, Problem
from engine.verify.verifier import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

CONFIGS = (
    LongKConfig(layout=Layout.NN, tile_n=32, stages=4, splits=16),
    LongKConfig(layout=Layout.NN, tile_n=256, stages=4, splits=4),
    LongKConfig(layout=Layout.NN, tile_n=16, stages=6, splits=3, swap=True),
    LongKConfig(layout=Layout.NN, tile_n=64, stages=2, splits=1),
    LongKConfig(layout=Layout.NN, tile_n=64, stages=12, splits=8),
    LongKConfig(layout=Layout.NN, tile_n=64, stages=4, splits=16, ctas_per_sm=1),
    LongKConfig(layout=Layout.TN, tile_n=128, stages=4, splits=8),
    LongKConfig(layout=Layout.TN, tile_n=64, stages=4, splits=12, swap=True),
)
# the long-K shapes, and residues in M, N and K against every tile
SHAPES = ("128x128x16384", "200x264x3000", "40x72x1096")


@pytest.fixture(scope="module")
def libraries() -> dict[str, str]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    built = compile_configs(list(CONFIGS), target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {c.name: b.library for c, b in zip(CONFIGS, built, strict=True)}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_the_cluster_split_k_passes_the_verifier(libraries, config, shape, verifier_sandboxes):
    problem = Problem.parse(shape, config.layout)
    if not config.is_valid(problem):
        pytest.skip(config.is_valid(problem).reason)
    result = verify(libraries[config.name], problem)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.ok, (config.name, result.reason, result.message, result.stderr_tail)


def test_the_result_is_the_same_on_every_run_and_needs_no_workspace(libraries):
    import torch

    from engine.gpu.runtime import KernelLibrary

    config = CONFIGS[0]
    problem = Problem(200, 264, 3000, config.layout)
    kernel = KernelLibrary(libraries[config.name])
    assert kernel.workspace_size(problem.m, problem.n, problem.k) == 0
    generator = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(problem.m, problem.k, device="cuda", generator=generator).half()
    b = torch.randn(problem.k, problem.n, device="cuda", generator=generator).half()
    reference = (a.double() @ b.double()).float()
    stream = torch.cuda.current_stream()
    outputs = []
    for _ in range(3):
        c = torch.full((problem.m, problem.n), float("nan"), dtype=torch.float16, device="cuda")
        error = kernel.launch(
            a.data_ptr(),
            b.data_ptr(),
            c.data_ptr(),
            problem.m,
            problem.n,
            problem.k,
            0,
            stream.cuda_stream,
        )
        stream.synchronize()
        assert error == 0
        outputs.append(c)
    assert all(torch.equal(outputs[0], c) for c in outputs[1:])
    error = (outputs[0].float() - reference).norm() / reference.norm()
    assert error < 1e-3, float(error)
