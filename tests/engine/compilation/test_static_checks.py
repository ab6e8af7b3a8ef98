"""The static gate (engine.compilation.static_checks): every cheat whose expected reason is a static
one is rejected with it, before any GPU time; honest sources and libraries pass.

cuBLAS wrapped in the ABI (tests/fixtures/good_kernels/cublas_wrapped.cu) is a harness fixture,
not a candidate: it includes and links cuBLAS by design and never goes through the gate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.compilation import static_checks as sc
from engine.compilation.compile import compile_many
from engine.problem import Layout
from engine.verify import harness_kernels
from engine.verify.verifier import REASONS

STATIC = (sc.SIZE, sc.INCLUDE, sc.API, sc.SYMBOLS)
CHEATS = [(p, harness_kernels.expected_reason(p)) for p in harness_kernels.cheat_paths()]
SOURCE_CHEATS = [p for p, reason in CHEATS if reason in STATIC[:3]]
SYMBOL_CHEATS = [p for p, reason in CHEATS if reason == sc.SYMBOLS]
RUNTIME_CHEATS = [p for p, reason in CHEATS if reason not in STATIC]

ABI_TAIL = """
GEMMFORGE_DEFINE_ABI_VERSION
GEMMFORGE_EXPORT size_t gemmforge_workspace_size(int, int, int) { return 0; }
"""


def ids(path: Path) -> str:
    return path.stem


# ---- the fixtures themselves ----------------------------------------------------------------


def test_there_are_at_least_twenty_cheats_each_with_a_known_reason_and_a_verify_row():
    paths = harness_kernels.cheat_paths()
    assert len(paths) >= 20
    for path in paths:
        assert harness_kernels.expected_reason(path) in REASONS, path.name
        second_line = path.read_text().splitlines()[1]
        assert second_line.startswith("// "), path.name
        assert "docs/verification.md" in second_line or "Compile limits" in second_line, path.name


def test_the_static_reasons_are_verifier_reasons():
    assert set(STATIC) <= set(REASONS)


# ---- source ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SOURCE_CHEATS, ids=ids)
def test_it_rejects_each_source_cheat_with_its_reason(path):
    result = sc.check_candidate(path.read_text())
    assert not result.ok
    assert result.reason == harness_kernels.expected_reason(path), result.message
    assert result.findings[0].reason == result.reason


@pytest.mark.parametrize("path", SYMBOL_CHEATS + RUNTIME_CHEATS, ids=ids)
def test_the_symbol_and_runtime_cheats_get_past_the_source_filter(path):
    # what the source filter cannot see: the symbol check or the GPU verifier must catch these
    assert sc.check_source(path.read_text()).ok


def _family_sources() -> dict[str, str]:
    from engine.codegen.sm80 import Sm80Config
    from engine.codegen.sm90 import Sm90Config

    return {
        "sm90": Sm90Config(layout=Layout.TN).render(),
        "sm80": Sm80Config(layout=Layout.NN).render(),
    }


@pytest.mark.parametrize(
    "name",
    [
        "reference",
        "reference_gemm.cuh",
        "sm90",
        "sm80",
        *[p.stem for p in harness_kernels.bad_kernel_paths()],
    ],
)
def test_it_accepts_honest_sources(name):
    sources = {
        "reference": harness_kernels.REFERENCE.read_text(),
        "reference_gemm.cuh": (
            harness_kernels.REPO / "engine" / "cuda" / "reference_gemm.cuh"
        ).read_text(),
        **_family_sources(),
        **{p.stem: p.read_text() for p in harness_kernels.bad_kernel_paths()},
    }
    if name == "other_stream":  # its stream creation is exactly what the gate is for
        assert sc.check_source(sources[name]).reason == sc.API
        return
    result = sc.check_source(sources[name])
    assert result.ok, result.findings


def test_the_cublas_wrapped_harness_fixture_would_not_pass_as_a_candidate():
    result = sc.check_source((harness_kernels.GOOD_KERNELS / "cublas_wrapped.cu").read_text())
    assert result.reason == sc.INCLUDE
    assert any("cublasGemmEx" in f.subject for f in result.findings)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("cuda_runtime.h", True),
        ("cute/tensor.hpp", True),
        ("cutlass/gemm/device/gemm_universal_adapter.h", True),
        ("cuda/std/cstdint", True),
        ("cooperative_groups/reduce.h", True),
        ("type_traits", True),
        ("/etc/passwd", False),
        ("/dev/stdin", False),
        ("cutlass/../../../etc/passwd", False),
        ("../kernel.cu", False),
        ("thread", False),
        ("dlfcn.h", False),
        ("cublasLt.h", False),
        ("unistd.h", False),
        ("cute\\tensor.hpp", False),
    ],
)
def test_the_include_allow_list(header, ok):
    assert (sc.header_verdict(header) is None) is ok


@pytest.mark.parametrize(
    "text",
    [
        '#  include "/etc/shadow"\n',
        "# /* hidden */ include </proc/self/environ>\n",
        "#define H </etc/passwd>\n#include H\n",
        "#include_next <stdio.h>\n",
        '#embed "/etc/passwd"\n',
        '#inc\\\nlude "/etc/passwd"\n',
        '%:include "/etc/passwd"\n',
    ],
)
def test_it_sees_through_include_disguises(text):
    assert sc.check_source(text + ABI_TAIL).reason == sc.INCLUDE


def test_includes_inside_comments_and_strings_do_not_count():
    text = '// #include "/etc/passwd"\n/* #include </dev/stdin> */\n#include "gemmforge_abi.h"\n'
    assert sc.check_source(text + ABI_TAIL).ok


@pytest.mark.parametrize(
    ("snippet", "subject"),
    [
        ("cudaEventCreate(&e);", "cudaEventCreate"),
        ("cudaStreamSynchronize(s);", "cudaStreamSynchronize"),
        ("cudaMallocAsync(&p, 1, s);", "cudaMallocAsync"),
        ("cudaFree(p);", "cudaFree"),
        ("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);", "cudaDeviceSetLimit"),
        ("std::thread t(f);", "std::thread"),
        ('popen("nvidia-smi", "r");', "popen("),
        ('system("rm -rf /");', "system("),
        ('execvp("sh", argv);', "execvp("),
        ("fork();", "fork("),
        ("int fd = socket(2, 1, 0);", "socket("),
        ('cudaGetDriverEntryPoint("cuStreamCreate", &f, 0, &q);', "cudaGetDriverEntryPoint"),
        (
            "cudaGetDriverEntryPointByVersion(name, &f, 12000, 0, &q);",
            "cudaGetDriverEntryPointByVersion",
        ),
        (
            'cuGetProcAddress("cuTensorMapX" "cublasLtMatmul", &f, 12000, 0, &q);',
            "cuGetProcAddress",
        ),
        ("k<<<g, b, 0, 0>>>(x);", "<<<g, b, 0, 0>>>"),
        ("k<<<g, b, smem, (cudaStream_t)0>>>(x);", "<<<g, b, smem, (cudaStream_t)0>>>"),
        ("k<<<g, b, 0, cudaStreamPerThread>>>(x);", "cudaStreamPerThread"),
    ],
)
def test_it_flags_forbidden_apis(snippet, subject):
    result = sc.check_source(f'#include "gemmforge_abi.h"\nvoid f() {{ {snippet} }}\n')
    assert result.reason == sc.API
    assert any(f.subject == subject for f in result.findings), result.findings


def test_it_lets_a_source_resolve_the_tma_descriptor_functions_by_name_as_cutlass_does():
    text = (
        '#include "gemmforge_abi.h"\n'
        "void f() { cudaGetDriverEntryPointByVersion(\n"
        '    "cuTensorMapReplaceAddress", &found, 12000, cudaEnableDefault, &status); }\n'
    )
    assert sc.check_source(text + ABI_TAIL).ok


def test_it_does_not_mistake_thread_local_or_launches_on_the_stream_for_cheats():
    text = (
        '#include "gemmforge_abi.h"\n'
        "static thread_local int cached = -1;\n"
        "void f(cudaStream_t stream) { k<true><<<dim3(1, 2), 256, 0, stream>>>(x); "
        "cudaMemsetAsync(p, 0, 4, stream); }\n"
    )
    assert sc.check_source(text).ok


def test_findings_carry_line_numbers_and_a_record():
    result = sc.check_source('#include "gemmforge_abi.h"\n\nvoid f() { getenv("X"); }\n')
    assert result.findings[0].line == 3
    record = result.to_dict()
    assert record["reason"] == sc.API
    assert record["findings"][0]["subject"] == "getenv"


def test_an_oversized_source_is_rejected_before_anything_else():
    text = '#include "/etc/passwd"\n' + "//" + "x" * sc.MAX_SOURCE_BYTES
    result = sc.check_source(text)
    assert result.reason == sc.SIZE
    assert len(result.findings) == 1


# ---- symbols (pure) -------------------------------------------------------------------------

SHARED_TINY = [
    "_ITM_deregisterTMCloneTable",
    "_Unwind_Resume",
    "__cudaGetKernel",
    "__cudaLaunchKernel",
    "__cudaPopCallConfiguration",
    "__cudaPushCallConfiguration",
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaRegisterFunction",
    "__cudaUnregisterFatBinary",
    "__cxa_atexit",
    "__cxa_finalize",
    "__gxx_personality_v0",
    "cudaGetLastError",
]


def test_it_parses_nm_output():
    output = (
        "                 w _ITM_deregisterTMCloneTable\n"
        "                 U __cudaRegisterFatBinary@libcudart.so.13\n"
        "                 U dlopen@GLIBC_2.34\n"
    )
    assert sc.parse_nm(output) == [
        "_ITM_deregisterTMCloneTable",
        "__cudaRegisterFatBinary",
        "dlopen",
    ]


def test_a_plain_kernel_imports_only_allowed_symbols():
    assert sc.check_imports(SHARED_TINY).ok


def test_it_accepts_the_stream_initialisation_of_newer_libstdcxx():
    # GCC 13+ builds of a CUTLASS kernel (which includes <iostream>) import this (H200 host)
    assert sc.check_imports([*SHARED_TINY, "_ZSt21ios_base_library_initv"]).ok


@pytest.mark.parametrize(
    "symbol",
    [
        "dlopen",
        "dlsym",
        "pthread_create",
        "fork",
        "execve",
        "system",
        "popen",
        "socket",
        "connect",
        "getenv",
        "fopen",
        "cublasGemmEx",
        "cublasLtMatmul",
        "cudaStreamCreate",
        "cudaStreamCreateWithFlags",
        "cudaEventRecord",
        "cudaDeviceSynchronize",
        "cudaMalloc",
        "cudaFree",
        "cudaStreamSetAttribute",
        "cudaDeviceSetLimit",
        "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE",
    ],
)
def test_it_rejects_each_forbidden_import_by_name(symbol):
    result = sc.check_imports([*SHARED_TINY, symbol])
    assert result.reason == sc.SYMBOLS
    assert [f.subject for f in result.findings] == [symbol]


def test_a_static_runtime_library_is_rejected_unless_allowed():
    imports = [s for s in SHARED_TINY if not s.startswith("__cuda") and s != "cudaGetLastError"]
    imports += ["dlopen", "pthread_create", "socket"]
    strict = sc.check_imports(imports)
    assert strict.reason == sc.SYMBOLS
    assert "statically" in strict.message
    lenient = sc.check_imports(imports, allow_static_runtime=True)
    assert lenient.ok
    assert lenient.notes
    assert (
        sc.check_imports([*imports, "cublasGemmEx"], allow_static_runtime=True).reason == sc.SYMBOLS
    )


# ---- symbols (nvcc) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_candidates(tmp_path_factory):
    """The symbol cheats, the gate-passing runtime cheats and the reference, built as candidates
    are (shared CUDA runtime) for sm_80: one parallel batch of tiny builds."""
    from engine import abi
    from engine.config import EngineConfig

    cache = tmp_path_factory.mktemp("cache")

    config = EngineConfig(cache_dir=cache)
    paths = [*SYMBOL_CHEATS, *RUNTIME_CHEATS, harness_kernels.REFERENCE]
    flags = (harness_kernels.layout_flag(Layout.NN), *sc.candidate_flags(config.nvcc))
    results = compile_many(
        [p.read_text() for p in paths],
        jobs=2,
        archs=("sm_80",),
        extra_flags=(*flags, f"-I{abi.CUDA_DIR}"),
        config=config,
    )
    return dict(zip([p.stem for p in paths], results, strict=True))


@pytest.mark.nvcc
@pytest.mark.parametrize("path", SYMBOL_CHEATS, ids=ids)
def test_it_rejects_each_symbol_cheat_by_its_import(built_candidates, path):
    built = built_candidates[path.stem]
    assert built.ok, built.log[-2000:]
    result = sc.check_candidate(path.read_text(), built.library)
    assert result.reason == sc.SYMBOLS, result
    assert result.findings[0].subject in {"cudaStreamCreate", "dlopen", "dlsym", "pthread_create"}


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [*RUNTIME_CHEATS, harness_kernels.REFERENCE], ids=ids)
def test_runtime_cheats_and_the_reference_pass_the_symbol_check(built_candidates, path):
    built = built_candidates[path.stem]
    assert built.ok, built.log[-2000:]
    result = sc.check_candidate(path.read_text(), built.library)
    assert result.ok, result.findings


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("family", ["sm90", "sm80"])
def test_a_family_build_passes_the_symbol_check(family):
    """One CUTLASS build per family with the candidate flags (~60-70 s each; cached)."""
    from engine.codegen.sm80 import Sm80Config
    from engine.codegen.sm90 import Sm90Config
    from engine.compilation.compile import compile_source

    config = Sm90Config(layout=Layout.TN) if family == "sm90" else Sm80Config(layout=Layout.NN)
    built = compile_source(config.render(), archs=config.archs, extra_flags=sc.candidate_flags())
    assert built.ok, built.log[-2000:]
    result = sc.check_candidate(config.render(), built.library)
    assert result.ok, result.findings
