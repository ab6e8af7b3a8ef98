"""The bundle's ops at run time (gemmforge_bundle, unpacked from a zip and imported in a child
process: the ops register under one name per process): dispatch over M ranges, the arch and
driver guard, fallbacks, autograd. The CUDA side is exercised by the gpu-marked test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.problem import Problem
from engine.publish.bundle import BundleKernel, unpack, write_bundle
from tests.engine.publish.bundle_process import run_in_bundle


def kernel(shape: str, layout: str, name: str, archs: tuple[str, ...], lo: int, hi: int):
    return BundleKernel(
        problem=Problem.parse(shape, layout),
        name=name,
        source="// test kernel\n",
        archs=archs,
        m_lo=lo,
        m_hi=hi,
    )


KERNELS = [
    kernel("16x4096x4096", "tn", "hgemm_sm90_small", ("sm_90a",), 1, 45),
    kernel("128x4096x4096", "tn", "hgemm_sm90_mid", ("sm_90a",), 46, 362),
    kernel("1024x4096x4096", "tn", "hgemm_sm80_big", ("sm_80",), 363, 4096),
    kernel("256x1024x512", "nn", "llm_0123456789abcdef", ("sm_90a",), 256, 256),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bundle")
    out = write_bundle(KERNELS, tmp / "b.zip", environment={}, title="test")
    return unpack(out, tmp / "unpacked")


def test_the_manifest_carries_each_kernels_m_range(root):
    manifest = json.loads((root / "gemmforge_bundle" / "kernels.json").read_text())
    assert [(e["m"], e["m_lo"], e["m_hi"]) for e in manifest["kernels"]] == [
        (16, 1, 45),
        (128, 46, 362),
        (1024, 363, 4096),
        (256, 256, 256),
    ]


def test_every_m_in_a_range_dispatches_to_its_kernel_and_others_fall_back(root):
    out = run_in_bundle(
        "for m in (1, 45, 46, 362, 363, 4096, 4097, 0):\n"
        "    print(m, _ops.kernel_for(m, 4096, 4096, 'tn'))\n"
        "print('nn', _ops.kernel_for(16, 4096, 4096, 'nn'))\n"
        "print('llm', _ops.kernel_for(255, 1024, 512, 'nn'),\n"
        "      _ops.kernel_for(256, 1024, 512, 'nn'))\n",
        root,
    )
    assert out.splitlines() == [
        "1 hgemm_sm90_small",
        "45 hgemm_sm90_small",
        "46 hgemm_sm90_mid",
        "362 hgemm_sm90_mid",
        "363 hgemm_sm80_big",
        "4096 hgemm_sm80_big",
        "4097 None",
        "0 None",
        "nn None",
        "llm None llm_0123456789abcdef",
    ]


@pytest.mark.parametrize(
    ("arch", "capability", "runs"),
    [
        ("sm_90a", (9, 0), True),
        ("sm_90a", (10, 0), False),  # arch-specific cubins run on that GPU only
        ("sm_90a", (8, 0), False),
        ("sm_80", (8, 6), True),  # same major, newer minor: binary compatible
        ("sm_80", (9, 0), False),  # no PTX in the bundle: nothing to JIT for another major
        ("sm_86", (8, 0), False),
        ("sm_100a", (10, 0), True),
    ],
)
def test_a_cubin_runs_only_where_its_arch_is_binary_compatible(root, arch, capability, runs):
    out = run_in_bundle(f"print(_ops.arch_runs({arch!r}, {capability!r}))", root)
    assert out.strip() == str(runs)


def test_a_driver_older_than_the_build_is_a_reason_to_fall_back(root):
    out = run_in_bundle(
        "print(_ops.cannot_run(('sm_90a',), (9, 0), 12020, 12040))\n"
        "print(_ops.cannot_run(('sm_90a',), (9, 0), 13000, 12040))\n"
        "print(_ops.cannot_run(('sm_90a',), (9, 0), None, None))\n",
        root,
    )
    assert out.splitlines() == [
        "built with CUDA 12.4, the driver supports CUDA 12.2",
        "None",
        "None",
    ]


def test_a_gpu_of_another_arch_falls_back_with_exactly_one_warning(root):
    # a test double for the device: an sm_80 GPU; the sm_90a kernels must not be tried, the
    # sm_80 one is (and is not built here, which is the second reason, still no second warning)
    out = run_in_bundle(
        "import warnings\n"
        "_ops._capability = lambda device: (8, 0)\n"
        "_ops._driver_version = lambda: None\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for m in (1, 16, 128, 200, 1024):\n"
        "        print(m, _ops.usable(_ops.bucket_for(m, 4096, 4096, 'tn'), 0))\n"
        "print(len(caught))\n"
        "print(caught[0].message)\n",
        root,
    )
    lines = out.splitlines()
    assert lines[:5] == ["1 False", "16 False", "128 False", "200 False", "1024 False"]
    assert lines[5] == "1"
    assert "built for sm_90a, this GPU is sm_80" in lines[6]


def test_operands_no_kernel_takes_have_no_kernel_form(root):
    out = run_in_bundle(
        "h = torch.float16\n"
        "a, b = torch.randn(16, 64).to(h), torch.randn(64, 32).to(h)\n"
        "w = torch.randn(32, 64).to(h)\n"
        "def form(x, y):\n"
        "    f = _ops.operand_form(x, y)\n"
        "    return None if f is None else f[1]\n"
        "print(form(a, b), form(a, w.t()))\n"
        "print(form(a.float(), b.float()), form(a.to(torch.bfloat16), b.to(torch.bfloat16)))\n"
        "print(form(a.t().contiguous().t(), b))\n"  # column-major A
        "big = torch.randn(16, 65).to(h)\n"
        "print(form(big[:, 1:], b))\n"  # a strided slice
        "flat = torch.randn(16 * 64 + 1).to(h)\n"
        "print(form(flat[1:].view(16, 64), b))\n"  # contiguous but 2-byte aligned
        "print(form(a, torch.randn(64, 64).to(h)[:, ::2]))\n"  # neither B nor B^T contiguous
        "print(form(a.unsqueeze(0), b))\n"  # 3-D
        "print(form(a, torch.randn(65, 32).to(h)))\n",  # inner sizes differ
        root,
    )
    assert out.splitlines() == [
        "nn tn",
        "None None",
        "None",
        "None",
        "None",
        "None",
        "None",
        "None",
    ]


@pytest.mark.slow
def test_fallbacks_give_torch_matmuls_result_for_any_dtype_and_layout(root):
    out = run_in_bundle(
        "torch.manual_seed(0)\n"
        "for dt in (torch.float16, torch.bfloat16, torch.float32):\n"
        "    a, b = torch.randn(16, 64, dtype=dt), torch.randn(64, 32, dtype=dt)\n"
        "    w = torch.randn(32, 64, dtype=dt)\n"
        "    x = torch.randn(2, 8, 64, dtype=dt)\n"
        "    print(torch.equal(torch.ops.gemmforge.hgemm(a, b), a @ b),\n"
        "          torch.equal(torch.ops.gemmforge.hgemm(a.t().contiguous().t(), b), a @ b),\n"
        "          torch.equal(torch.ops.gemmforge.hgemm_linear(x, w), x @ w.t()),\n"
        "          torch.equal(gemmforge_bundle.linear(x, w), x @ w.t()),\n"
        "          torch.equal(gemmforge_bundle.matmul(a, b), a @ b))\n",
        root,
    )
    assert out.splitlines() == ["True True True True True"] * 3


@pytest.mark.slow
def test_gradients_through_the_ops_equal_torch_matmuls_and_pass_gradcheck(root):
    out = run_in_bundle(
        "from torch.autograd import gradcheck\n"
        "torch.manual_seed(0)\n"
        "d = torch.float64\n"
        "a = torch.randn(5, 3, dtype=d, requires_grad=True)\n"
        "b = torch.randn(3, 4, dtype=d, requires_grad=True)\n"
        "x = torch.randn(2, 5, 3, dtype=d, requires_grad=True)\n"
        "w = torch.randn(4, 3, dtype=d, requires_grad=True)\n"
        "print(gradcheck(torch.ops.gemmforge.hgemm, (a, b)))\n"
        "print(gradcheck(torch.ops.gemmforge.hgemm_linear, (x, w)))\n"
        "g = torch.randn(2, 5, 4, dtype=d)\n"
        "gx, gw = torch.autograd.grad(gemmforge_bundle.linear(x, w), (x, w), g)\n"
        "rx, rw = torch.autograd.grad(torch.nn.functional.linear(x, w), (x, w), g)\n"
        "print(torch.allclose(gx, rx), torch.allclose(gw, rw))\n"
        "print(torch.ops.gemmforge.hgemm(a, b).grad_fn.name())\n"
        "print(gemmforge_bundle.linear(x, w).grad_fn.name())\n",  # the direct call defers
        root,
    )
    lines = out.splitlines()
    assert lines[:3] == ["True", "True", "True True"]
    assert "gemmforge_hgemm_" in lines[3]  # the op's registered backward, not MmBackward
    assert "gemmforge_hgemm_linear" in lines[4]
