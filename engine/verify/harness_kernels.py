"""Kernels that test the harness itself: the reference kernel, honest wrappers and known-bad
kernels (tests/fixtures/), compiled for a layout."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine import abi
from engine.compilation.compile import CompileResult, compile_source
from engine.compilation.toolkit import find_cublas
from engine.problem import Layout

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "engine" / "cuda" / "reference.cu"
BAD_KERNELS = REPO / "tests" / "fixtures" / "bad_kernels"
GOOD_KERNELS = REPO / "tests" / "fixtures" / "good_kernels"
CHEATS = REPO / "tests" / "fixtures" / "cheats"
# cheats that misbehave after many calls or on special inputs (a one-shot verifier misses them):
# each says the phase that must catch it ("verify": the verifier; "timed": the checks in the timing
# protocols)
TIMED = REPO / "tests" / "fixtures" / "timed"
_EXPECT_RE = re.compile(r"^// expect: (\w+)", re.MULTILINE)
_PHASE_RE = re.compile(r"^// phase: (verify|timed)$", re.MULTILINE)
# expected outcome of a cheat whose trick the timed protocols take away: it does the work, so it
# is neither rejected nor faster than the kernel it wraps
NO_GAIN = "no_gain"


def expected_reason(path: Path) -> str:
    match = _EXPECT_RE.search(path.read_text())
    if match is None:
        raise ValueError(f"{path} has no '// expect: <reason>' line")
    return match.group(1)


def expected_phase(path: Path) -> str:
    match = _PHASE_RE.search(path.read_text())
    if match is None:
        raise ValueError(f"{path} has no '// phase: verify|timed' line")
    return match.group(1)


def timed_paths() -> list[Path]:
    return sorted(TIMED.glob("*.cu"))


def bad_kernel_paths() -> list[Path]:
    return sorted(BAD_KERNELS.glob("*.cu"))


def cheat_paths() -> list[Path]:
    return sorted(CHEATS.glob("*.cu"))


def layout_flag(layout: Layout) -> str:
    return f"-DGEMMFORGE_LAYOUT_TN={int(layout is Layout.TN)}"


def build(paths: list[Path], layout: Layout, *, jobs: int = 8) -> list[CompileResult]:
    """Compiles fixture kernels for ``layout`` in parallel, in order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda path: build_one(path, layout), paths))


def build_one(path: Path, layout: Layout, *, extra_flags: tuple[str, ...] = ()) -> CompileResult:
    """Compiles one fixture kernel; a source that includes cuBLAS is linked with it."""
    source = path.read_text()
    flags = [layout_flag(layout), f"-I{abi.CUDA_DIR}", *extra_flags]
    libraries: tuple[str, ...] = ()
    if "cublas_v2.h" in source:
        cublas = find_cublas()
        flags += [
            f"-I{cublas.include_dir}",
            f"-L{cublas.lib_dir}",
            f"-Xlinker=-rpath={cublas.lib_dir}",
        ]
        libraries = cublas.libraries
    return compile_source(source, extra_flags=tuple(flags), libraries=libraries)
