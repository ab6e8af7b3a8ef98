"""Every cheat in tests/fixtures/cheats/ is rejected with its expected reason by the pipeline a
candidate goes through: the static gate on the source, the build (shared CUDA runtime), the gate
on the library, then the GPU verifier, whose child runs in the candidate sandbox
(engine.isolation.sandbox). Honest kernels get through the same pipeline: the reference kernel and
the best sm90 and sm80 configs of the curated-library sweep (cuBLAS wrapped in the ABI cannot be a
candidate, it links cuBLAS; the verifier accepts it in test_gpu_harness). Runs on the
GPU, skipped without a GPU."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import pytest

from engine.codegen import KernelConfig, get_family
from engine.compilation import static_checks as sc
from engine.compilation.compile import CompileResult, compile_source
from engine.isolation import processes
from engine.isolation.forkserver import FORKED
from engine.problem import Layout, Problem
from engine.verify import harness_kernels
from engine.verify.verifier import Verifications, verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = Problem(1024, 1024, 1024)  # multiples of 16: fp16_mma_accum needs them


def odd_shape(layout: Layout) -> Problem:
    return Problem(1000, 264, 520, layout)  # not a multiple of any tile; TMA-aligned (× 8)


# The best configs of bench/results/2026-12-03-h200-library/library-run2.json (NVIDIA H200):
# (knobs, the shape where it was the fastest config of its family)
HONEST_CONFIGS = {
    # fastest sm90 at 4096³ NN (0.988× cuBLASLt-autotune), and at 1024×4096×16384, 1024×8192²
    "sm90_best_nn": (
        {
            "layout": "nn", "tile_m": 128, "tile_n": 256, "tile_k": 64, "cluster_m": 1,
            "cluster_n": 1, "schedule": "coop", "epilogue": "tma", "stages": 0,
            "scheduler": "persistent", "decomposition": "heuristic", "splits": 1,
            "raster": "n", "swizzle": 8,
        },
        Problem(4096, 4096, 4096, Layout.NN),
    ),
    # fastest sm90 at 4096³ and 8192³ TN: cluster 2×1, stream-K (uses the workspace)
    "sm90_best_tn_streamk": (
        {
            "layout": "tn", "tile_m": 128, "tile_n": 256, "tile_k": 64, "cluster_m": 2,
            "cluster_n": 1, "schedule": "coop", "epilogue": "tma", "stages": 0,
            "scheduler": "streamk", "decomposition": "heuristic", "splits": 1,
            "raster": "heuristic", "swizzle": 1,
        },
        Problem(4096, 4096, 4096, Layout.TN),
    ),
    # fastest config of all at 64³ (1.029× cuBLASLt-autotune) and 128³
    "sm80_best_small": (
        {
            "layout": "nn", "tile_m": 32, "tile_n": 64, "tile_k": 64, "warp_m": 1, "warp_n": 2,
            "stages": 3, "swizzle": 1, "splits": 1,
        },
        Problem(64, 64, 64, Layout.NN),
    ),
    # fastest sm80 at 64×8192×16384: split-K 4 (uses the workspace)
    "sm80_best_splitk": (
        {
            "layout": "nn", "tile_m": 64, "tile_n": 256, "tile_k": 32, "warp_m": 1, "warp_n": 4,
            "stages": 4, "swizzle": 1, "splits": 4,
        },
        Problem(64, 8192, 16384, Layout.NN),
    ),
}  # fmt: skip


def honest_config(label: str) -> KernelConfig:
    knobs, _ = HONEST_CONFIGS[label]
    family = "sm90" if label.startswith("sm90") else "sm80"
    return get_family(family).from_knobs(knobs)


def gpu_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def candidate_build(config: KernelConfig) -> CompileResult:
    """A family config built the way a candidate is: only the GPU's SASS, shared CUDA runtime."""
    archs = type(config).archs_for(gpu_arch())
    return compile_source(config.render(), archs=archs, extra_flags=sc.candidate_flags())


def runs_here(config: KernelConfig) -> bool:
    return config.FAMILY != "sm90" or gpu_arch().startswith("sm_90")


@cache
def honest_builds() -> dict[str, CompileResult]:
    """Every honest config this GPU runs, compiled in parallel once (nvcc, 35-70 s of a core
    each; the compile cache keeps them)."""
    labels = [label for label in HONEST_CONFIGS if runs_here(honest_config(label))]
    with ThreadPoolExecutor(len(labels)) as pool:
        built = pool.map(lambda label: candidate_build(honest_config(label)), labels)
        return dict(zip(labels, built, strict=True))


def first_rejection(
    source: str,
    build: Callable[[], CompileResult],
    problems: Sequence[Problem],
    sandboxes,
    *,
    timeout: float = 120,
) -> tuple[str, str]:
    """(reason, message) of the first stage that rejects the candidate; ("ok", "") if none.
    Every verifier child must have run in the candidate sandbox."""
    gate = sc.check_candidate(source)
    if not gate.ok:
        return gate.reason, gate.message
    built = build()
    assert built.ok, built.log[-4000:]
    gate = sc.check_candidate(source, built.library)
    if not gate.ok:
        return gate.reason, gate.message
    for problem in problems:
        result = verify(built.library, problem, timeout=timeout)
        sandboxes.assert_all_sandboxed()
        if not result.ok:
            return result.reason, f"{problem}: {result.message} {result.stderr_tail[-1000:]}"
    return "ok", ""


def fixture_build(path, layout: Layout) -> Callable[[], CompileResult]:
    return lambda: harness_kernels.build_one(path, layout, extra_flags=sc.candidate_flags())


@pytest.mark.parametrize("path", harness_kernels.cheat_paths(), ids=lambda p: p.stem)
def test_it_rejects_each_cheat_with_its_reason(path, verifier_sandboxes):
    reason, message = first_rejection(
        path.read_text(), fixture_build(path, SHAPE.layout), [SHAPE], verifier_sandboxes
    )
    assert reason == harness_kernels.expected_reason(path), message


def test_the_reference_built_as_a_candidate_passes_gate_and_verifier(verifier_sandboxes):
    problems = [SHAPE, odd_shape(SHAPE.layout)]
    path = harness_kernels.REFERENCE
    reason, message = first_rejection(
        path.read_text(), fixture_build(path, SHAPE.layout), problems, verifier_sandboxes
    )
    assert reason == "ok", message


@pytest.mark.parametrize("label", list(HONEST_CONFIGS))
def test_the_best_sm90_and_sm80_configs_pass_gate_and_verifier(label, verifier_sandboxes):
    config = honest_config(label)
    if not runs_here(config):
        pytest.skip(f"the sm90 family needs a Hopper GPU, this is {gpu_arch()}")
    _, best_at = HONEST_CONFIGS[label]
    problems = [p for p in (best_at, odd_shape(config.layout)) if config.is_valid(p)]
    assert best_at in problems, config.is_valid(best_at).reason
    reason, message = first_rejection(
        config.render(),
        lambda: honest_builds()[label],
        problems,
        verifier_sandboxes,
        timeout=processes.Timeout.VERIFY,
    )
    assert reason == "ok", f"{config.name}: {reason}: {message}"


def test_every_cheat_forked_by_the_fork_server_is_rejected_with_its_reason(verifier_sandboxes):
    """The campaign's path: a batch of verifications, each child forked by one fork server."""
    expected, libraries = [], []
    for path in harness_kernels.cheat_paths():
        source = path.read_text()
        if not sc.check_candidate(source).ok:
            continue  # stopped by the static gate: never reaches a verifier
        built = fixture_build(path, SHAPE.layout)()
        assert built.ok, built.log[-4000:]
        if not sc.check_candidate(source, built.library).ok:
            continue
        expected.append((path.stem, harness_kernels.expected_reason(path)))
        libraries.append(built.library)
    assert len(libraries) >= 5, "8 cheats get past the static gates to the verifier (H200)"
    verdicts = Verifications(libraries, SHAPE, jobs=8, timeout=120, fork_server=True).results()
    verifier_sandboxes.assert_all_sandboxed()
    assert all(c.endswith(FORKED) for c in verifier_sandboxes.commands)
    pairs = list(zip(expected, verdicts, strict=True))
    got = [(name, verdict.reason) for (name, _), verdict in pairs]
    assert got == expected, [f"{name}: {verdict.message}" for (name, _), verdict in pairs]


def test_honest_kernels_forked_by_the_fork_server_pass(verifier_sandboxes):
    libraries = [fixture_build(harness_kernels.REFERENCE, SHAPE.layout)().library]
    for label in HONEST_CONFIGS:
        config, (_, best_at) = honest_config(label), HONEST_CONFIGS[label]
        if runs_here(config) and best_at == Problem(4096, 4096, 4096, Layout.NN):
            libraries.append(honest_builds()[label].library)
    problem = Problem(4096, 4096, 4096, Layout.NN)
    verdicts = Verifications(libraries, problem, jobs=8, fork_server=True).results()
    assert all(c.endswith(FORKED) for c in verifier_sandboxes.commands)
    assert [v.reason for v in verdicts] == ["ok"] * len(libraries), [v.message for v in verdicts]
