"""The triton family on a real GPU: AOT-compiled Triton kernels pass the verifier through the
kernel C ABI at shapes with residues in M, N and K (every variant: split-K with the last-CTA
reduction, persistent, TMA loads and store, both layouts), split-K gives the same bits whichever
split finishes last, and a bundle holding a Triton kernel builds, loads and runs in a process
where Triton cannot be imported; a kernel built for one N and K (``fixed_n``, ``fixed_k``) passes
the verifier on its problem and refuses any other. Skipped without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.codegen import TritonConfig
from engine.problem import Layout, Problem
from engine.verify.verifier import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

VARIANTS = {
    "plain": {},
    "small": {"tile_m": 16, "tile_n": 32, "tile_k": 32, "warps": 2, "stages": 2},
    "wide": {"tile_m": 128, "tile_n": 128, "tile_k": 64, "warps": 8, "stages": 4},
    "evenk": {"tile_k": 64, "even_k": True},  # Inductor's K-mask-free code, where K allows it
    "splitk": {"tile_k": 64, "splits": 4},
    "splitk-persistent": {"tile_k": 64, "splits": 3, "schedule": "persistent"},
    "persistent-tma": {
        "tile_m": 128,
        "tile_n": 128,
        "tile_k": 64,
        "warps": 8,
        "schedule": "persistent",
        "loads": "tma",
    },
    "tma-store": {"loads": "tma", "store": "tma", "splits": 2},
    # N and K as the kernel's constants: each serves one problem below (residues, and even K)
    "fixed-nk": {"fixed_n": 264, "fixed_k": 3000},
    "fixed-nk-evenk": {"tile_k": 64, "even_k": True, "fixed_n": 256, "fixed_k": 128},
}
PROBLEMS = (
    Problem(64, 256, 128),
    Problem(200, 264, 3000),  # residues in M, N and K for every tile above
    Problem(1, 8, 8),
    Problem(1000, 72, 4104),
)


def configs(layout: Layout) -> dict[str, TritonConfig]:
    return {name: TritonConfig(layout=layout, **knobs) for name, knobs in VARIANTS.items()}


@pytest.fixture(scope="module")
def libraries() -> dict[tuple[str, Layout], Path]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    wanted = {(name, layout): c for layout in Layout for name, c in configs(layout).items()}
    built = compile_configs(list(wanted.values()), target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {key: b.library for key, b in zip(wanted, built, strict=True)}


@pytest.mark.parametrize("layout", list(Layout), ids=str)
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.shape)
def test_triton_kernels_pass_the_verifier_through_the_abi(libraries, problem, layout):
    from engine.verify.verifier import Verifications

    problem = Problem(problem.m, problem.n, problem.k, layout)
    names = [n for n, c in configs(layout).items() if c.is_valid(problem)]  # splits ≤ K tiles
    batch = Verifications([libraries[(n, layout)] for n in names], problem, jobs=8)
    for name, result in zip(names, batch.results(), strict=True):
        assert result.ok, (name, problem.key, result.reason, result.message, result.stderr_tail)


def test_a_triton_kernel_is_verified_in_the_candidate_sandbox(libraries, verifier_sandboxes):
    result = verify(libraries[("splitk", Layout.TN)], Problem(200, 264, 3000, Layout.TN))
    assert result.ok, (result.reason, result.message, result.stderr_tail)
    verifier_sandboxes.assert_all_sandboxed()


def test_split_k_gives_the_same_bits_whatever_split_finishes_last(libraries):
    import torch

    from engine.gpu.runtime import KernelLibrary

    problem = Problem(200, 264, 3000)
    kernel = KernelLibrary(libraries[("splitk", Layout.NN)])
    generator = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(problem.m, problem.k, device="cuda", generator=generator).half()
    b = torch.randn(problem.k, problem.n, device="cuda", generator=generator).half()
    size = kernel.workspace_size(problem.m, problem.n, problem.k)
    outputs = []
    for fill in (float("nan"), 12345.0, -1.0):  # whatever the workspace held before
        workspace = torch.full((size // 4 + 1,), fill, device="cuda")
        c = torch.full((problem.m, problem.n), float("nan"), dtype=torch.float16, device="cuda")
        stream = torch.cuda.current_stream()
        error = kernel.launch(
            a.data_ptr(),
            b.data_ptr(),
            c.data_ptr(),
            problem.m,
            problem.n,
            problem.k,
            workspace.data_ptr(),
            stream.cuda_stream,
        )
        stream.synchronize()
        assert error == 0
        outputs.append(c)
    reference = (a.float() @ b.float()).half()
    assert torch.isfinite(outputs[0]).all()
    assert float((outputs[0].float() - reference.float()).abs().max()) < 0.25
    for other in outputs[1:]:
        assert torch.equal(outputs[0].view(torch.int16), other.view(torch.int16))


BLOCK_TRITON = "raise ImportError('triton is not available to gemmforge bundles')\n"
RUN_BUNDLE = textwrap.dedent(
    """
    import sys, torch, gemmforge_bundle
    from gemmforge_bundle._ops import hgemm
    a = torch.randn(200, 3000, dtype=torch.float16, device="cuda")
    b = torch.randn(3000, 264, dtype=torch.float16, device="cuda")
    got = hgemm(a, b)
    ref = a.float() @ b.float()
    err = float((got.float() - ref).norm() / ref.norm())
    assert err < 1e-3, err
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "triton")
    assert not loaded, loaded
    print("ok", err)
    """
)


def test_a_bundle_with_a_triton_kernel_runs_where_triton_cannot_be_imported(libraries, tmp_path):
    from engine.publish.bundle import BundleKernel, unpack, write_bundle

    config = configs(Layout.NN)["splitk"]
    problem = Problem(200, 264, 3000)
    kernel = BundleKernel(
        problem=problem,
        name=config.name,
        source=config.render(),  # the zip embeds its cubin (engine.publish.bundle.bundled_source)
        archs=config.archs,
        speedups={"torch": 1.0},
    )
    bundle = write_bundle([kernel], tmp_path / "bundle.zip", environment={}, title="triton")
    root = unpack(bundle, tmp_path / "unpacked")
    blocker = tmp_path / "no-triton" / "triton"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(BLOCK_TRITON)
    path = [str(blocker.parent), str(root), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    for argv in (["-m", "gemmforge_bundle.build"], ["-c", RUN_BUNDLE]):
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-4000:])
    assert "ok" in done.stdout


def test_a_kernel_built_for_one_n_and_k_refuses_another(libraries):
    import torch

    from engine.gpu.runtime import KernelLibrary

    kernel = KernelLibrary(str(libraries[("fixed-nk-evenk", Layout.NN)]))
    a = torch.randn(64, 256, device="cuda").half()
    b = torch.randn(256, 256, device="cuda").half()
    c = torch.empty(64, 256, device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr())
    assert kernel.launch(*ptrs, 64, 256, 128, 0, stream) == 0  # its own N and K (M is free)
    assert kernel.launch(*ptrs, 32, 256, 128, 0, stream) == 0
    assert kernel.launch(*ptrs, 64, 256, 256, 0, stream) != 0  # another K
    assert kernel.launch(*ptrs, 64, 128, 128, 0, stream) != 0  # another N
    torch.cuda.synchronize()
