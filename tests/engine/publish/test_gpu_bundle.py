"""Bundles on a real GPU: the ops match torch, replay under CUDA-graph capture, and work in
place of nn.Linear (skipped without a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.engine.publish.test_bundle import campaign_db, unpacked  # noqa: F401 - fixture reuse

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SCRIPT = textwrap.dedent(
    """
    import torch, gemmforge_bundle
    torch.manual_seed(0)
    x = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    linear = torch.nn.Linear(4096, 4096, bias=False, dtype=torch.float16, device="cuda")
    want = linear(x)
    got = torch.ops.gemmforge.hgemm_linear(x, linear.weight)
    err = float((got.float() - want.float()).norm() / want.float().norm())
    assert err < 1e-3, err
    compiled = torch.compile(lambda a, w: torch.ops.gemmforge.hgemm_linear(a, w))
    assert torch.allclose(compiled(x, linear.weight), got)
    out = torch.empty_like(got)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=s):
        out.copy_(torch.ops.gemmforge.hgemm_linear(x, linear.weight))
    x.normal_()
    graph.replay()
    torch.cuda.synchronize()
    ref = x @ linear.weight.t()
    err = float((out.float() - ref.float()).norm() / ref.float().norm())
    assert err < 1e-3, err
    print("ok")
    """
)


def test_a_built_bundle_verifies_and_replays_under_graph_capture(campaign_db, tmp_path):  # noqa: F811
    root = unpacked(campaign_db, tmp_path)
    # keep the caller's PYTHONPATH: on the GPU host it holds the carried nvidia-cutlass wheel
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    for argv in (
        ["-m", "gemmforge_bundle.build"],
        ["-m", "gemmforge_bundle.verify"],
        ["-c", SCRIPT],
    ):
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
