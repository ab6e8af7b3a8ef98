"""The sm90 family's newer tiles on a real GPU pass the verifier, residues in M, N and K
included: warpgroups split along N (cuBLASLt's 192×192 and 128×320, and 128×256; both layouts,
TMA and direct-store epilogues, stream-K), and tiles M below 64, which run the transposed problem
(16, 32 and 48 rows; ping-pong and cooperative stream-K split-K), 128-column TMA epilogue
tiles, and odd tile N (96, 160, 192 outside the split-N kernel). Skipped without a GPU."""

from __future__ import annotations

import pytest

from engine.codegen import Sm90Config
from engine.problem import Layout, Problem
from engine.verify.verifier import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

CONFIGS = (
    Sm90Config(layout=Layout.NN, tile_m=192, tile_n=192, cluster_n=2, warpgroups="n"),
    Sm90Config(layout=Layout.TN, tile_m=192, tile_n=192, cluster_m=2, warpgroups="n"),
    Sm90Config(layout=Layout.NN, tile_m=192, tile_n=192, epilogue="nosmem", warpgroups="n"),
    Sm90Config(
        layout=Layout.NN,
        tile_m=192,
        tile_n=192,
        scheduler="streamk",
        decomposition="splitk",
        splits=2,
        warpgroups="n",
    ),
    Sm90Config(layout=Layout.TN, tile_m=128, tile_n=256, cluster_m=2, warpgroups="n"),
    Sm90Config(layout=Layout.NN, tile_m=128, tile_n=320, cluster_m=2, warpgroups="n"),
    Sm90Config(layout=Layout.NN, tile_m=48, tile_n=64, cluster_m=2, schedule="pingpong"),
    Sm90Config(layout=Layout.TN, tile_m=32, tile_n=64, cluster_n=2, schedule="pingpong"),
    Sm90Config(layout=Layout.NN, tile_m=16, tile_n=64, schedule="pingpong", epilogue="nosmem"),
    Sm90Config(
        layout=Layout.NN,
        tile_m=32,
        tile_n=128,
        scheduler="streamk",
        decomposition="splitk",
        splits=8,
    ),
    Sm90Config(layout=Layout.NN, tile_n=128, cluster_m=2, schedule="pingpong", epilogue_n=128),
    Sm90Config(layout=Layout.TN, tile_n=256, cluster_m=2, epilogue_n=128),
    Sm90Config(layout=Layout.NN, tile_n=96, cluster_m=2),
    Sm90Config(layout=Layout.TN, tile_n=160, epilogue="nosmem"),
    Sm90Config(layout=Layout.NN, tile_m=64, tile_n=160, schedule="pingpong"),
    Sm90Config(layout=Layout.TN, tile_m=64, tile_n=192, cluster_m=2, schedule="pingpong"),
)
SHAPES = ((1000, 1160, 520), (4096, 3072, 512))  # the first leaves a residue on every side


@pytest.fixture(scope="module")
def libraries() -> dict[str, str]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    built = compile_configs(list(CONFIGS), target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {c.name: b.library for c, b in zip(CONFIGS, built, strict=True)}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_new_sm90_tiles_pass_the_verifier(libraries, config, shape, verifier_sandboxes):
    problem = Problem(*shape, config.layout)
    result = verify(libraries[config.name], problem)
    verifier_sandboxes.assert_all_sandboxed()
    assert result.ok, (config.name, result.reason, result.message, result.stderr_tail)
