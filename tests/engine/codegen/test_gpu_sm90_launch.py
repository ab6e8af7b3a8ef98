"""The sm90 launcher on a real GPU when the buffers move under it: a call on new buffers for the
same problem re-points the kept params (the TMA descriptors of A, B and D, or the direct-store
epilogue's D pointer), so every call must still write its own C from its own A and B, whether
the buffers rotate, return, or the problem changes in between. Skipped without a GPU."""

from __future__ import annotations

import pytest

from engine.codegen import Sm90Config
from engine.codegen.library import library
from engine.problem import Layout, Problem
from tests.engine.codegen.moved_buffers import assert_each_call_writes_its_own_product

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

# one of each way the params keep D (TMA store, direct store), a 2-CTA cluster, a stream-K
# kernel (re-initialised every call), and a TN kernel whose operands the launcher swaps
NAMES = (
    "hgemm_sm90_128x128x64_c1x1x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1",
    "hgemm_sm90_128x128x64_c1x1x1_sauto_nn_coop_epinosmem_persistent_rheuristic_sw1",
    "hgemm_sm90_128x128x64_c2x1x1_sauto_nn_coop_epitma_persistent_rheuristic_sw1",
    "hgemm_sm90_128x128x64_c1x1x1_sauto_nn_coop_epitma_streamk_heuristic_rheuristic_sw1",
)


def configs() -> list[Sm90Config]:
    found = {c.name: c for layout in Layout for c in library("sm90", layout)}
    chosen = [found[name] for name in NAMES]
    transposed = next(
        c
        for c in found.values()
        if c.layout is Layout.TN
        and c.swapped
        and "persistent" in c.name
        and c.is_valid(Problem(136, 256, 520, Layout.TN))
        and c.is_valid(Problem(384, 512, 1024, Layout.TN))
    )
    return [*chosen, transposed]


@pytest.fixture(scope="module")
def libraries() -> dict[str, str]:
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    chosen = configs()
    built = compile_configs(chosen, target_arch=cuda_driver.local_arch())
    assert all(b.ok for b in built), [b.error for b in built if not b.ok]
    return {c.name: b.library for c, b in zip(chosen, built, strict=True)}


@pytest.mark.parametrize("config", configs(), ids=lambda c: c.name)
def test_each_call_on_moved_buffers_writes_its_own_product(libraries, config):
    assert_each_call_writes_its_own_product(
        config,
        libraries[config.name],
        Problem(384, 512, 1024, config.layout),
        Problem(136, 256, 520, config.layout),
    )
