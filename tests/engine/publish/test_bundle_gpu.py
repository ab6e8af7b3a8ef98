"""The bundle's Python ops on a GPU: built with nvcc, loaded, its arch guard, dynamic M,
torch.compile and CUDA-graph capture (child process: the ops register once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.codegen import Sm90Config
from engine.problem import Problem
from engine.publish.bundle import BundleKernel, unpack, write_bundle

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc, pytest.mark.slow]

PROBLEM = Problem.parse("256x4096x4096", "tn")

CHECKS = """
import warnings, torch, gemmforge_bundle
from gemmforge_bundle import _ops
torch.manual_seed(0)
w = torch.randn(4096, 4096, device='cuda', dtype=torch.float16)
def close(out, ref):
    return float((out.float() - ref).norm() / ref.norm()) < 1e-2
# the guard lets the kernel run on the GPU it was built for (an H100/H200: sm_90)
assert _ops.usable(_ops.bucket_for(256, 4096, 4096, 'tn'), 0), 'the guard refused sm_90'
for m in (1, 7, 100, 256, 511):  # dynamic M, residues included
    x = torch.randn(m, 4096, device='cuda', dtype=torch.float16)
    assert _ops.plan(x, w.t()) is not None, m
    assert close(gemmforge_bundle.linear(x, w), x.float() @ w.float().t()), m
x = torch.randn(256, 4096, device='cuda', dtype=torch.float16)
ref = x.float() @ w.float().t()
f = torch.compile(torch.ops.gemmforge.hgemm_linear, fullgraph=True)
assert close(f(x, w), ref), 'torch.compile'
out = torch.ops.gemmforge.hgemm_linear(x, w)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    out = torch.ops.gemmforge.hgemm_linear(x, w)
graph.replay(); torch.cuda.synchronize()
assert close(out, ref), 'graph capture'
# another architecture: a test double for the capability, fresh guard state
_ops._usable.clear()
_ops._capability = lambda device: (8, 0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    a = gemmforge_bundle.linear(x, w)
    b = gemmforge_bundle.linear(x, w)
assert len(caught) == 1, [str(c.message) for c in caught]
assert torch.equal(a, torch.nn.functional.linear(x, w))
print('ok')
"""


def test_a_built_bundle_guards_dispatches_compiles_and_captures(tmp_path: Path):
    config = next(
        c for c in Sm90Config.candidates(PROBLEM.layout) if c.is_valid(PROBLEM) and c.splits == 1
    )
    kernel = BundleKernel(
        problem=PROBLEM,
        name=config.name,
        source=config.render(),
        archs=tuple(config.archs),
        m_lo=1,
        m_hi=511,
    )
    out = write_bundle([kernel], tmp_path / "b.zip", environment={}, title="gpu")
    root = unpack(out, tmp_path / "unpacked")
    # the unpacked bundle first; nvidia-cutlass may be on the caller's path, not site-packages
    pythonpath = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    # the Python ops (the C++ ops: tests/engine/publish/test_bundle_native.py); the checks use a
    # test double for the GPU's capability, which only the Python guard reads
    env = {**os.environ, "PYTHONPATH": pythonpath, "GEMMFORGE_PYTHON_OPS": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "gemmforge_bundle.build"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    done = subprocess.run(
        [sys.executable, "-c", CHECKS],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")
