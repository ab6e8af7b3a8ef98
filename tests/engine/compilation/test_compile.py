"""The compile stage: ptxas parsing, cache keys, the content-addressed cache, errors as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.compilation import compile as comp
from engine.compilation import toolkit
from engine.config import EngineConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PTXAS = FIXTURES / "ptxas"

TINY = """\
#include "gemmforge_abi.h"
__global__ void gf_fill(__half* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __float2half(0.0f);
}
extern "C" int gemmforge_hgemm(const __half*, const __half*, __half* C, int M, int N, int,
                               void*, cudaStream_t stream) {
  gf_fill<<<(M * N + 255) / 256, 256, 0, stream>>>(C, M * N);
  return int(cudaGetLastError());
}
extern "C" size_t gemmforge_workspace_size(int, int, int) { return 0; }
GEMMFORGE_DEFINE_ABI_VERSION
"""


# ---- pure ----------------------------------------------------------------------------------


def test_it_parses_a_cutlass_sm90_ptxas_report():
    (kernel,) = comp.parse_ptxas((PTXAS / "nvcc13_sm90_cutlass_cooperative.txt").read_text())
    assert kernel.arch == "sm_90a"
    assert kernel.name.startswith("_ZN7cutlass13device_kernel")
    assert kernel.registers == 168
    assert kernel.barriers == 2
    assert kernel.shared_bytes == 0
    assert not kernel.spills


def test_it_parses_spills_and_stack_per_entry():
    kernels = comp.parse_ptxas((PTXAS / "nvcc13_sm80_spills.txt").read_text())
    by_name = {k.name: k for k in kernels}
    assert set(by_name) == {"_Z4tinyPi", "_Z12spill_kernelPfi"}
    spill = by_name["_Z12spill_kernelPfi"]
    assert (spill.registers, spill.stack_bytes) == (32, 1056)
    assert (spill.spill_stores_bytes, spill.spill_loads_bytes) == (2408, 2416)
    assert spill.constant_bytes == 364
    assert not by_name["_Z4tinyPi"].spills


def test_it_reports_one_record_per_arch_with_static_smem():
    kernels = comp.parse_ptxas((PTXAS / "nvcc13_two_archs_smem.txt").read_text())
    assert [k.arch for k in kernels] == ["sm_90a", "sm_80"]
    assert all(k.shared_bytes == 1024 and k.stack_bytes == 256 for k in kernels)


def test_it_ignores_text_that_is_not_a_ptxas_report():
    assert comp.parse_ptxas("kernel.cu(3): error: identifier x is undefined\n") == ()


def test_it_maps_archs_to_gencode_flags():
    assert comp.arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert comp.arch_flags("sm_80") == ["-gencode=arch=compute_80,code=sm_80"]
    assert comp.arch_flags("sm_90") == ["-gencode=arch=compute_90,code=sm_90"]
    with pytest.raises(ValueError, match="unknown arch"):
        comp.arch_flags("hopper")


def test_cache_keys_are_stable_and_sensitive_to_every_input():
    base = {
        "archs": ("sm_90a",),
        "flags": comp.BASE_FLAGS,
        "libraries": (),
        "nvcc_version": "13.0.88",
        "cutlass_version": "4.2.0",
    }
    key = comp.cache_key("src", **base)
    assert key == comp.cache_key("src", **base)
    assert len(key) == 64
    variants = [
        comp.cache_key("src2", **base),
        comp.cache_key("src", **{**base, "archs": ("sm_80",)}),
        comp.cache_key("src", **{**base, "flags": (*comp.BASE_FLAGS, "-G")}),
        comp.cache_key("src", **{**base, "libraries": ("cublas",)}),
        comp.cache_key("src", **{**base, "nvcc_version": "13.1.0"}),
        comp.cache_key("src", **{**base, "cutlass_version": "4.3.0"}),
    ]
    assert len({key, *variants}) == 7


def test_the_nvcc_command_has_the_house_flags(monkeypatch, tmp_path):
    argv = comp.nvcc_command(
        "kernel.cu",
        "lib.so",
        archs=("sm_80", "sm_90"),
        libraries=("cublasLt",),
        include_dirs=(tmp_path,),
    )
    assert argv[0] == "nvcc"
    for flag in ("-shared", "-fPIC", "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-v"):
        assert flag in argv
    assert "-gencode=arch=compute_80,code=sm_80" in argv
    assert "-gencode=arch=compute_90,code=sm_90" in argv
    assert f"-I{tmp_path}" in argv
    assert argv[-1] == "-lcublasLt"


def test_it_finds_the_cutlass_headers_and_version():
    include = toolkit.cutlass_include_dir()
    assert (include / "cute" / "tensor.hpp").is_file()
    assert toolkit.cutlass_version(include).count(".") == 2


def test_the_include_override_must_hold_cutlass(monkeypatch, tmp_path):
    monkeypatch.setenv("ENGINE_CUTLASS_INCLUDE", str(tmp_path))
    with pytest.raises(toolkit.CompileSetupError, match=r"cutlass\.h"):
        toolkit.cutlass_include_dir()


def test_a_compile_result_round_trips_through_json(tmp_path):
    result = comp.CompileResult(
        ok=True,
        library=tmp_path / comp.LIBRARY_NAME,
        source_hash="ab",
        archs=("sm_90a",),
        command="nvcc x",
        log="log",
        seconds=1.5,
        cached=False,
        resources=comp.parse_ptxas((PTXAS / "nvcc13_sm80_spills.txt").read_text()),
        key="k",
        entry=tmp_path,
    )
    loaded = comp.CompileResult.from_json(result.to_json(), entry=tmp_path)
    assert loaded.cached
    assert loaded == comp.CompileResult(**{**comp._fields(result), "cached": True})


def test_nvcc_builds_get_the_candidate_environment_and_limits(tmp_path, monkeypatch):
    """A stand-in nvcc that prints its environment and limits instead of building."""
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    monkeypatch.setenv("GEMMFORGE_LLM_API_KEY", "sk-test")
    fake = tmp_path / "fake-nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88";'
        " exit 0; fi\n"
        'env; echo "as=$(ulimit -v) core=$(ulimit -c)"; exit 1\n'
    )
    fake.chmod(0o755)
    config = EngineConfig(cache_dir=tmp_path / "cache", nvcc=str(fake), nvcc_memory_gb=4)
    result = comp.compile_source(TINY, archs=("sm_80",), config=config)
    assert not result.ok
    assert "SECRET_KEY" not in result.log
    assert "GEMMFORGE_LLM_API_KEY" not in result.log
    assert f"as={4 << 20} core=0" in result.log  # ulimit -v counts KiB
    assert "address space 4 GiB" in result.sandbox


def test_a_build_out_of_memory_under_its_limit_is_not_cached(tmp_path):
    fake = tmp_path / "fake-nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88";'
        " exit 0; fi\n"
        'echo "kernel.cu(3): catastrophic error: out of memory" >&2; exit 1\n'
    )
    fake.chmod(0o755)
    config = EngineConfig(cache_dir=tmp_path / "cache", nvcc=str(fake), nvcc_memory_gb=4)
    result = comp.compile_source(TINY, archs=("sm_80",), config=config)
    assert not result.ok
    assert "out of memory" in result.error
    assert "address space 4 GiB" in result.error
    assert comp.try_load(result.key, config) is None


def test_compile_configs_builds_every_family_of_a_batch_at_once_and_keeps_its_order(
    monkeypatch, tmp_path
):
    import threading

    from engine.codegen.sm80 import Sm80Config
    from engine.codegen.sm90 import Sm90Config
    from engine.problem import Layout

    both_running = threading.Barrier(2, timeout=5)  # broken unless both families build together
    archs_of: dict[str, tuple[str, ...]] = {}

    def compile_source(source, *, config, archs):
        both_running.wait()
        archs_of[source] = tuple(archs)
        return source

    monkeypatch.setattr(comp, "compile_source", compile_source)
    monkeypatch.setattr(comp, "nvcc_version", lambda nvcc: "13.0")
    monkeypatch.setattr(comp, "cutlass_version", lambda: "4.0")
    configs = [Sm90Config(layout=Layout.TN), Sm80Config(layout=Layout.TN)]
    engine_config = EngineConfig(cache_dir=tmp_path, compile_jobs=2)
    results = comp.compile_configs(configs, config=engine_config, target_arch="sm_90")
    assert results == [c.render() for c in configs]
    assert archs_of[configs[1].render()] == comp.get_family("sm80").archs_for("sm_90")


def test_compile_many_gives_each_source_its_own_arguments_over_the_shared_ones(
    monkeypatch, tmp_path
):
    seen: dict[str, dict] = {}

    def compile_source(source, *, config, **kwargs):
        seen[source] = kwargs
        return source

    monkeypatch.setattr(comp, "compile_source", compile_source)
    monkeypatch.setattr(comp, "nvcc_version", lambda nvcc: "13.0")
    monkeypatch.setattr(comp, "cutlass_version", lambda: "4.0")
    progressed: list[int] = []
    results = comp.compile_many(
        ["a", "b"],
        config=EngineConfig(cache_dir=tmp_path, compile_jobs=2),
        per_source=[{"archs": ("sm_80",)}, {}],
        archs=("sm_90a",),
        extra_flags=("-DX",),
        progress=lambda index, result: progressed.append(index),
    )
    assert results == ["a", "b"]
    assert seen["a"] == {"archs": ("sm_80",), "extra_flags": ("-DX",)}
    assert seen["b"] == {"archs": ("sm_90a",), "extra_flags": ("-DX",)}
    assert sorted(progressed) == [0, 1]


def test_compile_many_refuses_argument_sets_that_do_not_match_its_sources(tmp_path):
    with pytest.raises(ValueError, match="1 argument sets for 2 sources"):
        comp.compile_many(
            ["a", "b"], config=EngineConfig(cache_dir=tmp_path), per_source=[{"archs": ()}]
        )


# ---- nvcc ----------------------------------------------------------------------------------


@pytest.mark.nvcc
def test_a_second_compile_is_a_cache_hit(engine_config: EngineConfig):
    first = comp.compile_source(TINY, archs=("sm_80",), config=engine_config)
    assert first.ok, first.log
    assert not first.cached
    assert first.library is not None
    assert first.library.is_file()
    assert first.resources
    assert first.resources[0].name == "_Z7gf_fillP6__halfi"
    second = comp.compile_source(TINY, archs=("sm_80",), config=engine_config)
    assert second.cached
    assert second.library == first.library
    assert second.resources == first.resources
    assert "address space 16 GiB" in first.sandbox
    assert second.sandbox == first.sandbox
    entry = first.library.parent
    assert {p.name for p in entry.iterdir()} == {"kernel.cu", "lib.so", "result.json", "build.log"}
    assert entry.parent.name == first.key[:2]


@pytest.mark.nvcc
def test_an_nvcc_error_is_data_and_is_cached(engine_config: EngineConfig):
    bad = TINY.replace("c[i] = __float2half(0.0f);", "c[i] = undefined_thing;")
    result = comp.compile_source(bad, archs=("sm_80",), config=engine_config)
    assert not result.ok
    assert result.library is None
    assert "undefined_thing" in result.error
    assert not result.timed_out
    again = comp.compile_source(bad, archs=("sm_80",), config=engine_config)
    assert again.cached
    assert not again.ok
    assert again.log == result.log


@pytest.mark.nvcc
def test_a_timeout_is_data_and_is_not_cached(engine_config: EngineConfig):
    result = comp.compile_source(TINY, archs=("sm_90a",), config=engine_config, timeout=0.05)
    assert not result.ok
    assert result.timed_out
    assert "timed out" in result.error
    assert comp.try_load(result.key, engine_config) is None
    leftovers = [p.name for p in (engine_config.kernel_cache / result.key[:2]).iterdir()]
    assert [name for name in leftovers if not name.endswith(".lock")] == []


@pytest.mark.nvcc
def test_compile_many_keeps_order_and_reports_progress(engine_config: EngineConfig):
    sources = [TINY, TINY.replace("0.0f", "1.0f")]
    seen: list[int] = []
    results = comp.compile_many(
        sources,
        jobs=2,
        archs=("sm_80",),
        config=engine_config,
        progress=lambda i, r: seen.append(i),
    )
    assert [r.source_hash for r in results] == [comp.source_hash(s) for s in sources]
    assert all(r.ok for r in results)
    assert sorted(seen) == [0, 1]


@pytest.mark.nvcc
@pytest.mark.slow
def test_it_compiles_a_cutlass_sm90_tma_wgmma_kernel(engine_config: EngineConfig):
    source = (FIXTURES / "kernels" / "cutlass_sm90_cooperative_tn.cu").read_text()
    result = comp.compile_source(source, archs=("sm_90a",), config=engine_config)
    assert result.ok, result.log[-4000:]
    assert result.resources, result.log[-4000:]
    assert all(k.arch == "sm_90a" for k in result.resources)
    assert any("GemmUniversal" in k.name for k in result.resources)
    assert result.max_registers > 0
    assert not result.spills
    assert "C7510" not in result.log  # wgmma not serialized by a call (e.g. a device assert)
