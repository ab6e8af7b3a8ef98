"""The longk family (Hopper cluster split-K) on a real GPU: both layouts, swapped and not, tiles 16
to 256 wide, 1 to 16 splits, 2 to 12 stages, one CTA an SM or more, each reduction (pull through
DSMEM loads, push through bulk DSMEM copies, send through DSMEM stores from registers), with or
without an L2 prefetch, pass the verifier (fresh random inputs against an fp32 reference) on
shapes with M, N and K residues, need no workspace, and give the same result on every run (the
splits are summed in a fixed order), also when the buffers move between calls (the launcher
re-points the tensor maps it keeps); push and send give pull's result bit for bit (the same sums
in the same order). A tile's K over several clusters (``groups``) sums them in the caller's
workspace: whatever the workspace held before, and under a CUDA graph that replays one launch,
its result is the same bits. Two tiles that share P's loads by TMA multicast (``multicast``)
give their single-tile twin's bits; K tiles dealt to the cluster's CTAs in turn (``interleave``)
pass the verifier too, and so do A's loads under an L2 evict-first policy (``evict_first_a``).
Skipped without a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.codegen import LongKConfig
from engine.problem import Layout, Problem
from engine.verify.verifier import verify
from tests.engine.codegen.moved_buffers import assert_each_call_writes_its_own_product

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
    # push: shares of 5 or 6 rows (64 over 12); a swapped tile, 16 CTAs, 15 slots of 2 rows
    LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=12, reduce="push"),
    LongKConfig(layout=Layout.TN, tile_n=32, stages=4, splits=16, swap=True, reduce="push"),
    # the rest of each K slice prefetched into L2 (8 of 47 K tiles a CTA on 40x72x1096 and less)
    LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=8, reduce="push", prefetch=True),
    # a tile's K over several clusters: 4 x 4, 8 x 8 (64 slices), a swapped tile over 2 x 3
    LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=4, groups=4),
    LongKConfig(layout=Layout.NN, tile_n=32, stages=8, splits=8, groups=8),
    LongKConfig(layout=Layout.TN, tile_n=32, stages=4, splits=3, groups=2, swap=True),
    # two tiles along Q share P's loads: K-major P, MN-major P (swapped NN), a 16-CTA cluster;
    # 264 columns (or 200 rows, swapped) are an odd number of tiles, so one pair has a tile
    # outside C that loads zeros and stores nothing
    LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=8, multicast=2),
    LongKConfig(layout=Layout.NN, tile_n=32, stages=4, splits=4, swap=True, multicast=2),
    LongKConfig(layout=Layout.TN, tile_n=128, stages=6, splits=4, multicast=2),
    # send: a register pair a CTA (64 wide over 16), eight (128 over 4), two (32 wide over 8),
    # none for some CTAs (32 wide, swapped: 8 pairs over 12), two, one and one (16 wide, swapped,
    # over 3)
    LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=16, reduce="send"),
    LongKConfig(layout=Layout.NN, tile_n=128, stages=8, splits=4, reduce="send"),
    LongKConfig(layout=Layout.NN, tile_n=32, stages=8, splits=8, reduce="send"),
    LongKConfig(layout=Layout.TN, tile_n=32, stages=4, splits=12, swap=True, reduce="send"),
    LongKConfig(layout=Layout.NN, tile_n=16, stages=6, splits=3, swap=True, reduce="send"),
    # K tiles dealt in turn: 3 splits over 47 K tiles (uneven counts), a swapped 16-CTA cluster,
    # send, and TN
    LongKConfig(layout=Layout.NN, tile_n=64, stages=4, splits=3, interleave=True),
    LongKConfig(layout=Layout.NN, tile_n=64, stages=4, splits=16, swap=True, interleave=True),
    LongKConfig(layout=Layout.NN, tile_n=64, stages=6, splits=8, reduce="send", interleave=True),
    LongKConfig(layout=Layout.TN, tile_n=128, stages=4, splits=8, interleave=True),
    # A's loads under an L2 evict-first policy: unswapped (A is P), swapped (A is Q), with send
    LongKConfig(layout=Layout.NN, tile_n=64, stages=4, splits=8, evict_first_a=True),
    LongKConfig(layout=Layout.NN, tile_n=32, stages=4, splits=8, swap=True, evict_first_a=True),
    LongKConfig(layout=Layout.TN, tile_n=64, stages=6, splits=8, reduce="send", evict_first_a=True),
)
PUSHED = tuple(c for c in CONFIGS if c.reduce in ("push", "send"))
GROUPED = tuple(c for c in CONFIGS if c.groups > 1)
SHARED = tuple(c for c in CONFIGS if c.multicast > 1)
# the long-K shapes, and residues in M, N and K against every tile
SHAPES = ("128x128x16384", "200x264x3000", "40x72x1096")


@pytest.fixture(scope="module")
def libraries() -> dict[str, str]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    configs = [
        *CONFIGS,
        *(replace(c, reduce="pull") for c in PUSHED),
        *(replace(c, multicast=1) for c in SHARED),
    ]
    built = compile_configs(configs, target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {c.name: b.library for c, b in zip(configs, built, strict=True)}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_the_cluster_split_k_passes_the_verifier(libraries, config, shape, verifier_sandboxes):
    problem = Problem.parse(shape, config.layout)
    if not config.is_valid(problem):
        pytest.skip(config.is_valid(problem).reason)
    result = verify(libraries[config.name], problem)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.ok, (config.name, result.reason, result.message, result.stderr_tail)


def operands(problem: Problem, seed: int = 7):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(problem.m, problem.k, device="cuda", generator=generator).half()
    shape = (problem.n, problem.k) if problem.layout is Layout.TN else (problem.k, problem.n)
    b = torch.randn(*shape, device="cuda", generator=generator).half()
    return a, b


def reference(problem: Problem, a, b):
    """A·B in fp64, rounded to fp32; ``b`` as :func:`operands` lays it out."""
    b = b.double().T if problem.layout is Layout.TN else b.double()
    return (a.double() @ b).float()


def run(kernel, problem: Problem, a, b, workspace=None):
    """C from one launch of ``kernel`` (a KernelLibrary), into a buffer that starts as NaN."""
    import torch

    stream = torch.cuda.current_stream()
    c = torch.full((problem.m, problem.n), float("nan"), dtype=torch.float16, device="cuda")
    error = kernel.launch(
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        problem.m,
        problem.n,
        problem.k,
        0 if workspace is None else workspace.data_ptr(),
        stream.cuda_stream,
    )
    stream.synchronize()
    assert error == 0
    return c


def test_the_result_is_the_same_on_every_run_and_needs_no_workspace(libraries):
    import torch

    from engine.gpu.runtime import KernelLibrary

    config = CONFIGS[0]
    problem = Problem(200, 264, 3000, config.layout)
    kernel = KernelLibrary(libraries[config.name])
    assert kernel.workspace_size(problem.m, problem.n, problem.k) == 0
    a, b = operands(problem)
    expected = reference(problem, a, b)
    outputs = [run(kernel, problem, a, b) for _ in range(3)]
    assert all(torch.equal(outputs[0], c) for c in outputs[1:])
    error = (outputs[0].float() - expected).norm() / expected.norm()
    assert error < 1e-3, float(error)


@pytest.mark.parametrize("config", PUSHED, ids=lambda c: c.name)
def test_push_and_send_give_pulls_result_bit_for_bit(libraries, config):
    import torch

    from engine.gpu.runtime import KernelLibrary

    problem = Problem(200, 264, 3000, config.layout)
    a, b = operands(problem, seed=11)
    pushed = run(KernelLibrary(libraries[config.name]), problem, a, b)
    pulled = run(KernelLibrary(libraries[replace(config, reduce="pull").name]), problem, a, b)
    assert torch.equal(pushed, pulled)


@pytest.mark.parametrize("config", SHARED, ids=lambda c: c.name)
def test_multicast_gives_its_single_tile_twins_result_bit_for_bit(libraries, config):
    import torch

    from engine.gpu.runtime import KernelLibrary

    for problem in (Problem(200, 264, 3000, config.layout), Problem(128, 256, 4096, config.layout)):
        a, b = operands(problem, seed=13)
        shared = run(KernelLibrary(libraries[config.name]), problem, a, b)
        single = run(KernelLibrary(libraries[replace(config, multicast=1).name]), problem, a, b)
        assert torch.equal(shared, single), problem


@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[7], CONFIGS[9]], ids=lambda c: c.name)
def test_each_call_on_moved_buffers_writes_its_own_product(libraries, config):
    assert_each_call_writes_its_own_product(
        config,
        libraries[config.name],
        Problem(128, 256, 2048, config.layout),
        Problem(72, 136, 1000, config.layout),
    )


def workspace_for(kernel, problem: Problem, fill: int):
    import torch

    size = kernel.workspace_size(problem.m, problem.n, problem.k)
    assert size > 0
    return torch.full((size,), fill, dtype=torch.uint8, device="cuda")


@pytest.mark.parametrize("config", GROUPED, ids=lambda c: c.name)
def test_groups_give_the_same_bits_whatever_the_workspace_held(libraries, config):
    import torch

    from engine.gpu.runtime import KernelLibrary

    problem = Problem(200, 264, 3000, config.layout)
    kernel = KernelLibrary(libraries[config.name])
    a, b = operands(problem, seed=13)
    first = run(kernel, problem, a, b, workspace_for(kernel, problem, 0))
    for fill in (0xFF, 0x00, 0x5A):  # all ones, zeros, a pattern: no epoch the launch could hold
        assert torch.equal(run(kernel, problem, a, b, workspace_for(kernel, problem, fill)), first)
    reused = workspace_for(kernel, problem, 0xFF)
    assert all(torch.equal(run(kernel, problem, a, b, reused), first) for _ in range(3))
    expected = reference(problem, a, b)
    error = (first.float() - expected).norm() / expected.norm()
    assert error < 1e-3, float(error)


@pytest.mark.parametrize("config", GROUPED[:1], ids=lambda c: c.name)
def test_groups_hold_under_a_cuda_graph_that_replays_one_launch(libraries, config):
    import torch

    from engine.gpu.runtime import KernelLibrary

    problem = Problem(128, 128, 8192, config.layout)
    kernel = KernelLibrary(libraries[config.name])
    a, b = operands(problem, seed=17)
    c = torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda")
    workspace = workspace_for(kernel, problem, 0xFF)
    run(kernel, problem, a, b, workspace)  # warm-up, as a caller does before capturing
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        error = kernel.launch(
            a.data_ptr(), b.data_ptr(), c.data_ptr(), problem.m, problem.n, problem.k,
            workspace.data_ptr(), torch.cuda.current_stream().cuda_stream,
        )  # fmt: skip
    assert error == 0
    for seed in (19, 23, 29):  # new operands in the captured buffers, one replay each
        fresh_a, fresh_b = operands(problem, seed=seed)
        a.copy_(fresh_a), b.copy_(fresh_b)
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(
            c, run(kernel, problem, fresh_a, fresh_b, workspace_for(kernel, problem, 0))
        )


@pytest.mark.parametrize("config", GROUPED[:1], ids=lambda c: c.name)
def test_groups_refuse_a_launch_without_their_workspace(libraries, config):
    import torch

    from engine.gpu.runtime import KernelLibrary

    problem = Problem(128, 128, 8192, config.layout)
    kernel = KernelLibrary(libraries[config.name])
    a, b = operands(problem)
    c = torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda")
    stream = torch.cuda.current_stream()
    error = kernel.launch(
        a.data_ptr(), b.data_ptr(), c.data_ptr(), problem.m, problem.n, problem.k, 0,
        stream.cuda_stream,
    )  # fmt: skip
    assert error != 0
