"""The triton family: its space (Inductor's configs inside it), legality, rendering, and the
ahead-of-time build for sm_90a on a machine without a GPU — the library exports the kernel C
ABI and loads without Triton."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from engine.codegen import FAMILIES, TritonConfig, get_family, triton_blocks
from engine.codegen.library import library
from engine.codegen.triton import INDUCTOR_MM_CONFIGS, inductor_configs
from engine.compilation import static_checks, triton_aot
from engine.problem import Layout, Problem

triton_installed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None, reason="needs triton installed"
)


def test_the_family_is_registered_and_searchable():
    assert get_family("triton") is TritonConfig
    assert "triton" in FAMILIES


@pytest.mark.parametrize("layout", list(Layout))
def test_the_library_holds_every_config_inductor_tries_on_the_grid(layout):
    names = {c.name for c in library("triton", layout)}
    for shape in ("64x256x128", "512x512x256", "128x128x16384", "4096x4096x4096", "64x64x64"):
        problem = Problem.parse(shape, layout)
        wanted = inductor_configs(problem)
        assert wanted, shape
        assert {c.name for c in wanted} <= names, shape


def test_inductor_configs_are_scaled_to_the_problem_as_inductor_does():
    configs = inductor_configs(Problem.parse("64x256x128"))
    # blocks clipped to the next power of two of each dimension, warps to one a 16x16 sub-tile
    assert all(c.tile_m <= 64 and c.tile_k <= 128 for c in configs)
    assert all(c.warps * 256 <= c.tile_m * c.tile_n for c in configs)
    assert all(c.group_m == 8 and c.even_k for c in configs)
    # the latency-bound winner: 64x32 tiles, 5 stages
    assert any((c.tile_m, c.tile_n, c.stages) == (64, 32, 5) for c in configs)
    # on a large problem every Inductor config but one: 128x128x128 with 4 stages needs 256 KiB
    # of shared memory, more than Hopper has (Triton fails to launch it; Inductor drops it)
    unscaled = {
        (c.tile_m, c.tile_n, c.tile_k, c.stages, c.warps)
        for c in inductor_configs(Problem.parse("8192x8192x8192"))
    }
    assert set(INDUCTOR_MM_CONFIGS) - unscaled == {(128, 128, 128, 4, 8)}


def test_even_k_configs_are_valid_only_where_k_is_whole_tiles():
    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    assert config.is_valid(Problem.parse("128x128x4096"))
    verdict = config.is_valid(Problem.parse("128x128x4104"))
    assert not verdict
    assert "even_k" in verdict.reason
    assert TritonConfig(layout=Layout.NN, tile_k=64).is_valid(Problem.parse("128x128x4104"))


@pytest.mark.parametrize(
    ("knobs", "reason"),
    [
        ({"tile_m": 16, "tile_n": 16, "warps": 2}, "sub-tile"),
        ({"tile_m": 256, "tile_n": 256, "warps": 4}, "accumulators"),
        ({"tile_m": 256, "tile_n": 128, "tile_k": 128, "stages": 6, "warps": 8}, "shared"),
        ({"loads": "tma", "even_k": True}, "even_k"),
        ({"splits": 5}, "not one of"),
    ],
)
def test_it_rejects_illegal_configs_with_a_reason(knobs, reason):
    verdict = TritonConfig(layout=Layout.NN, **knobs).is_valid()
    assert not verdict
    assert reason in verdict.reason


def test_split_k_needs_as_many_k_tiles_as_splits():
    config = TritonConfig(layout=Layout.NN, tile_k=64, splits=16)
    assert config.is_valid(Problem.parse("128x128x1024"))
    assert not config.is_valid(Problem.parse("128x128x512"))


def test_triton_configs_are_hopper_only():
    config = TritonConfig(layout=Layout.NN)
    assert config.is_valid(None, "sm_90a")
    assert not config.is_valid(None, "sm_80")


def test_the_rendered_source_embeds_the_kernel_and_its_compile_spec():
    config = TritonConfig(layout=Layout.TN, splits=4, schedule="persistent", loads="tma")
    source = config.render()
    assert triton_blocks.is_triton_source(source)
    spec, python = triton_blocks.extract(source)
    assert spec.kernel == "hgemm"
    assert spec.num_warps == config.warps
    assert spec.constexprs["SPLITS"] == 4
    assert spec.constexprs["B_KMAJOR"] is True
    assert spec.constexprs["PERSISTENT"] is True
    assert spec.constexprs["TMA"] is True
    assert "@triton.jit" in python
    assert "def hgemm(" in python
    assert '#include "gemmforge_triton.h"' in source
    assert static_checks.check_source(source).ok  # the Python lives in a comment


def test_names_differ_in_every_knob():
    base = TritonConfig(layout=Layout.NN)
    names = {base.name}
    for knob, values in TritonConfig.SPACE.items():
        for value in values:
            config = TritonConfig(**{**base.knobs(), "layout": Layout.NN, knob: value})
            names.add(config.name)
    expected = 1 + sum(len(v) - 1 for v in TritonConfig.SPACE.values())
    assert len(names) == expected


def test_a_malformed_triton_block_is_an_error_with_a_reason():
    with pytest.raises(triton_blocks.TritonSourceError, match="not closed"):
        triton_blocks.extract("/* gemmforge-triton\n{}\n---\nx = 1\n")
    with pytest.raises(triton_blocks.TritonSourceError, match="spec"):
        triton_blocks.extract("/* gemmforge-triton\nnot json\n---\nx = 1\ngemmforge-triton */")
    spec = TritonConfig(layout=Layout.NN).spec()
    with pytest.raises(triton_blocks.TritonSourceError, match=r"\*/"):
        triton_blocks.embed(spec, "x = '*/'")


def test_the_cache_key_of_a_triton_source_names_tritons_version(monkeypatch):
    from engine.compilation import compile as comp

    base = {
        "archs": ("sm_90a",),
        "flags": comp.BASE_FLAGS,
        "libraries": (),
        "nvcc_version": "13.0.88",
        "cutlass_version": "4.2.0",
    }
    plain = comp.cache_key("src", **base)
    assert plain == comp.cache_key("src", **base, triton_version=None)
    assert comp.cache_key("src", **base, triton_version="3.6.0") != plain
    assert comp.cache_key("src", **base, triton_version="3.6.0") != comp.cache_key(
        "src", **base, triton_version="3.5.1"
    )


# -- the ahead-of-time build (nvcc and Triton, no GPU) ------------------------------------------

LOAD_WITHOUT_TRITON = textwrap.dedent(
    """
    import ctypes, json, sys
    sys.modules["triton"] = None  # any import of triton now fails
    lib = ctypes.CDLL(sys.argv[1])
    lib.gemmforge_workspace_size.restype = ctypes.c_size_t
    lib.gemmforge_workspace_size.argtypes = [ctypes.c_int] * 3
    print(json.dumps({
        "version": lib.gemmforge_abi_version(),
        "workspace": lib.gemmforge_workspace_size(128, 128, 4096),
        "triton_loaded": [m for m in sys.modules if m.startswith("triton") and sys.modules[m]],
    }))
    """
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One split-K, persistent, TMA kernel (TN) built for sm_90a into a fresh cache, and its
    build through the candidate flags (shared CUDA runtime) for the symbol allow-list."""
    from engine.compilation.compile import compile_source
    from engine.config import EngineConfig

    cache = tmp_path_factory.mktemp("triton-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("ENGINE_CACHE_DIR", str(cache))  # the bundle's build looks there too
    config = EngineConfig(cache_dir=cache)
    kernel = TritonConfig(
        layout=Layout.TN,
        tile_m=64,
        tile_n=64,
        tile_k=64,
        splits=4,
        loads="tma",
        store="tma",
        schedule="persistent",
    )
    source = kernel.render()
    family_build = compile_source(source, archs=kernel.archs, config=config)
    gated = compile_source(
        source, archs=kernel.archs, config=config, extra_flags=static_checks.candidate_flags()
    )
    yield kernel, source, family_build, gated
    patch.undo()


@pytest.mark.nvcc
@triton_installed
def test_a_triton_kernel_compiles_for_sm_90a_without_a_gpu(built):
    _kernel, _source, result, _gated = built
    assert result.ok, result.log[-3000:]
    header = (result.entry / triton_aot.HEADER_NAME).read_text()
    assert "0x7f, 0x45, 0x4c, 0x46" in header  # the cubin: an ELF image
    assert "GEMMFORGE_TRITON_SCRATCH_BYTES 0" not in header  # device descriptors need scratch
    [resources] = [r for r in result.resources if r.name == "hgemm"]
    assert resources.arch == "sm_90a"
    assert resources.registers > 0
    assert not resources.spills
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True
    ).stdout
    for symbol in ("gemmforge_hgemm", "gemmforge_workspace_size", "gemmforge_abi_version"):
        assert f" T {symbol}" in exported, symbol


@pytest.mark.nvcc
@triton_installed
def test_the_library_loads_and_answers_without_triton(built):
    _kernel, _source, result, _gated = built
    done = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_TRITON, str(result.library)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["version"] == 1
    assert answer["triton_loaded"] == []
    # 4 tiles x 4 splits of 64x64 fp32 partials, the counters and the descriptors' scratch
    assert answer["workspace"] >= 16 * 64 * 64 * 4 + 256


@pytest.mark.nvcc
@triton_installed
def test_the_library_passes_the_symbol_allow_list(built):
    _kernel, _source, _result, gated = built
    assert gated.ok, gated.log[-3000:]
    verdict = static_checks.check_library(gated.library)
    assert verdict.ok, verdict.message


@pytest.mark.nvcc
@triton_installed
def test_a_bundle_ships_the_compiled_kernel_and_builds_it_with_nvcc_alone(built, tmp_path):
    from engine.compilation.compile import compile_source
    from engine.publish.bundle import bundled_source

    kernel, source, _result, _gated = built
    shipped = bundled_source(source, kernel.archs)
    assert not triton_blocks.is_triton_source(shipped)  # the build will not run Triton
    assert '#include "gemmforge_triton.h"' not in shipped
    assert "kTritonCubin" in shipped
    assert "def hgemm(" in shipped
    rebuilt = compile_source(shipped, archs=kernel.archs)
    assert rebuilt.ok, rebuilt.log[-3000:]
    assert not (rebuilt.entry / triton_aot.HEADER_NAME).exists()


@pytest.mark.nvcc
@triton_installed
def test_a_triton_error_is_a_failed_build_with_its_log(engine_config):
    from engine.compilation.compile import compile_source

    source = TritonConfig(layout=Layout.NN).render().replace("acc = tl.dot(a, b, acc)", "acc = ")
    result = compile_source(source, archs=("sm_90a",), config=engine_config)
    assert not result.ok
    assert result.library is None
    assert "SyntaxError" in result.log or "invalid syntax" in result.log


# -- the family in the search ------------------------------------------------------------------


@triton_installed
def test_hopper_campaigns_search_the_triton_family_where_triton_is_installed():
    from engine.propose.space import families_for_arch

    assert "triton" in families_for_arch("sm_90")
    assert "triton" not in families_for_arch("sm_80")


@pytest.mark.slow
def test_a_full_space_beside_other_families_takes_tritons_curated_configs_only():
    from engine.propose.space import SearchSpace

    problem = Problem.parse("4096x4096x4096", "nn")
    mixed = SearchSpace.full(problem, families=("sm80", "triton"))
    triton_names = {c.name for c in mixed.configs if c.FAMILY == "triton"}
    curated = {c.name for c in library("triton", Layout.NN) if c.is_valid(problem, None)}
    assert triton_names == curated
    alone = SearchSpace.full(problem, families=("triton",))
    assert len(alone) > 100 * len(curated)


def test_the_policy_sees_the_triton_family_as_a_choice():
    import torch

    from engine.propose.policy import Policy
    from engine.propose.space import SearchSpace

    problem = Problem.parse("128x128x16384")
    families = ("sm90", "sm80", "triton")
    space = SearchSpace.library(problem, families=families)
    assert {c.FAMILY for c in space.configs} == set(families)
    policy = Policy(families, seed=0)
    probs = policy.log_probs(problem, space).detach().exp()
    triton = torch.tensor([c.FAMILY == "triton" for c in space.configs])
    assert float(probs[triton].sum()) > 0
    # a triton config rewarded above a CUTLASS one raises the family's own logit: the policy
    # learns the choice of family, not only knobs
    before = policy.logits(problem).detach()
    winner = next(c.name for c in space.configs if c.FAMILY == "triton")
    loser = next(c.name for c in space.configs if c.FAMILY == "sm90")
    policy.update(problem, space, {winner: 1.0, loser: -1.0})
    after = policy.logits(problem).detach()
    gain = after - before
    assert float(gain[families.index("triton")]) > float(gain[families.index("sm90")])


# -- Triton written by others (LLM proposers): the gate on its Python -----------------------------

BAD_PYTHON = (
    ("import os", "imports os"),
    ("x = open('f').read()", "uses open"),
    ("y = tl.__dict__", "private attribute"),
    ("z = getattr(tl, 'dot')", "uses getattr"),
    ("from triton.runtime import driver", "imports from triton.runtime"),
)


@pytest.mark.parametrize(("line", "why"), BAD_PYTHON)
def test_the_static_gate_refuses_triton_python_that_reaches_outside_triton(line, why):
    source = TritonConfig(layout=Layout.NN).render()
    bad = source.replace("import triton.language as tl", f"import triton.language as tl\n{line}")
    verdict = static_checks.check_source(bad)
    assert not verdict.ok
    assert verdict.reason == static_checks.API
    assert why in verdict.message
    assert bad.splitlines()[verdict.findings[0].line - 1] == line  # the line in the .cu


@pytest.mark.nvcc
@triton_installed
def test_the_build_refuses_such_python_before_running_it(engine_config, tmp_path):
    from engine.compilation.compile import compile_source

    marker = tmp_path / "ran"
    line = f"open({str(marker)!r}, 'w').write('ran')"
    source = (
        TritonConfig(layout=Layout.NN)
        .render()
        .replace("import triton.language as tl", f"import triton.language as tl\n{line}")
    )
    result = compile_source(source, archs=("sm_90a",), config=engine_config)
    assert not result.ok
    assert "uses open" in result.log
    assert not marker.exists()


def test_the_llm_prompt_explains_triton_kernels_when_it_shows_one():
    from engine.llm.prompt import GpuFacts, KernelExample, PromptContext, build_messages

    problem = Problem.parse("128x128x16384")
    triton = KernelExample(name="t", source=TritonConfig(layout=Layout.NN).render())
    cuda = KernelExample(name="c", source='#include "gemmforge_abi.h"\n')
    with_triton = build_messages(PromptContext(problem, GpuFacts.h200(), best=triton))
    without = build_messages(PromptContext(problem, GpuFacts.h200(), best=cuda))
    assert "## Triton kernels" in with_triton[-1]["content"]
    assert "## Triton kernels" not in without[-1]["content"]


def test_a_kernel_for_one_n_and_k_is_named_by_them_and_serves_only_them():
    from dataclasses import replace

    generic = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    fixed = replace(generic, fixed_n=2048, fixed_k=64)
    assert fixed.name == generic.name + "_n2048k64"
    assert TritonConfig.from_knobs(fixed.knobs()) == fixed
    assert "fixed_n" not in TritonConfig.SPACE  # the shipped policy's layout stays as it is
    assert fixed.is_valid(Problem.parse("256x2048x64"))
    assert fixed.is_valid(Problem.parse("7x2048x64"))  # M stays a run-time value
    verdict = fixed.is_valid(Problem.parse("256x1024x64"))
    assert not verdict
    assert "built for N=2048, K=64" in verdict.reason


@pytest.mark.parametrize(("fixed_n", "fixed_k"), [(2048, 0), (0, 64), (2044, 64), (-8, 64)])
def test_it_rejects_n_and_k_that_are_not_both_set_multiples_of_8(fixed_n, fixed_k):
    verdict = TritonConfig(layout=Layout.NN, fixed_n=fixed_n, fixed_k=fixed_k).is_valid()
    assert not verdict
    assert "both set, positive multiples of 8" in verdict.reason


def test_n_and_k_become_constants_and_leave_the_launch_arguments():
    generic = TritonConfig(layout=Layout.TN, tile_k=64)
    fixed = TritonConfig(layout=Layout.TN, tile_k=64, fixed_n=512, fixed_k=1024)
    plain = generic.render()
    assert "void* args[] = {&A, &B, &C, &M, &N, &K, &split_space, &scratch, &profile};" in plain
    assert "N and K are the kernel's constants" not in plain
    source = fixed.render()
    assert "void* args[] = {&A, &B, &C, &M, &split_space, &scratch, &profile};" in source
    assert "if (N != 512 || K != 1024) return int(cudaErrorInvalidValue);" in source
    spec, _ = triton_aot.extract(source)
    assert spec.signature["N"] == spec.signature["K"] == "constexpr"
    assert (spec.constexprs["N"], spec.constexprs["K"]) == (512, 1024)
    # the signature keeps its order: the compiled kernel's parameters are the rest, in order
    assert list(spec.signature)[:6] == ["A", "B", "C", "M", "N", "K"]


@pytest.mark.nvcc
@triton_installed
def test_a_kernel_for_one_n_and_k_builds_for_sm90a(engine_config):
    from engine.compilation.compile import compile_source

    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True, fixed_n=2048, fixed_k=64)
    result = compile_source(config.render(), archs=("sm_90a",), config=engine_config)
    assert result.ok, result.log[-2000:]
