"""Builds the bundle once: ``python -m gemmforge_bundle.build [--jobs N]``.

Builds each kernel (lib/<name>.so), the cuBLASLt shim that runs the pinned algorithms
(lib/gemmforge_cublaslt.so, when the manifest has any) and the C++ ops (lib/gemmforge_ops.so:
csrc/ops.cpp against this Python's torch, which must be a CUDA build; elsewhere it is skipped and
the Python ops serve). Needs nvcc (CUDA 12.4 or newer), the CUTLASS headers
(``pip install nvidia-cutlass`` or CUTLASS_INCLUDE=/path/to/cutlass/include) and, for the shim,
cuBLASLt's header and library (the nvidia-cublas wheel PyTorch installs, the CUDA toolkit's, or
CUBLAS_HOME=/folder/with/include/cublasLt.h).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CSRC = PACKAGE / "csrc"
SHIM = PACKAGE / "lib" / "gemmforge_cublaslt.so"
EXTENSION = PACKAGE / "lib" / "gemmforge_ops.so"
DIRECT = PACKAGE / "lib" / "gemmforge_direct.so"
CUBLASLT = "cublaslt"


def cutlass_include() -> Path:
    if os.environ.get("CUTLASS_INCLUDE"):
        return Path(os.environ["CUTLASS_INCLUDE"])
    spec = importlib.util.find_spec("cutlass_library")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "source" / "include"
        if (path / "cutlass" / "cutlass.h").is_file():
            return path
    raise SystemExit(
        "error: CUTLASS headers not found: pip install nvidia-cutlass, or set CUTLASS_INCLUDE"
    )


def command(entry: dict, manifest: dict, include: Path) -> list[str]:
    argv = [os.environ.get("NVCC", "nvcc"), *manifest["nvcc_flags"]]
    for arch in entry["archs"]:
        number = arch.removeprefix("sm_")
        argv.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    argv += [f"-I{PACKAGE / 'include'}", f"-I{include}"]
    argv += [
        str(PACKAGE / "kernels" / f"{entry['name']}.cu"),
        "-o",
        str(PACKAGE / "lib" / f"{entry['name']}.so"),
    ]
    return argv


def nvcc() -> str:
    return os.environ.get("NVCC", "nvcc")


def cublas_paths() -> tuple[Path, Path, str] | None:
    """cuBLASLt's include folder, library folder and the library to link (``:libcublasLt.so.13``):
    CUBLAS_HOME, else the nvidia-cublas wheel (the one PyTorch loads), else nvcc's toolkit."""
    roots = [Path(os.environ["CUBLAS_HOME"])] if os.environ.get("CUBLAS_HOME") else []
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        roots += [Path(location) / "cu13", Path(location) / "cublas"]
    if found := shutil.which(nvcc()):
        roots.append(Path(found).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        if not (root / "include" / "cublasLt.h").is_file():
            continue
        for lib_dir in (root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"):
            for suffix in (".so", ".so.13", ".so.12"):
                if (lib_dir / f"libcublasLt{suffix}").exists():
                    return root / "include", lib_dir, f":libcublasLt{suffix}"
    return None


def shim_command() -> list[str] | str:
    """nvcc's command for the cuBLASLt shim (host code only), or why there is none."""
    found = cublas_paths()
    if found is None:
        return "cuBLASLt not found: pip install nvidia-cublas, or set CUBLAS_HOME"
    include, lib_dir, library = found
    argv = [nvcc(), "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC"]
    argv += [f"-I{include}", str(CSRC / "cublaslt_shim.cu"), f"-L{lib_dir}", f"-l{library}"]
    return [*argv, f"-Xlinker=-rpath={lib_dir}", "-o", str(SHIM)]


def ops_flags(torch_dir: Path, abi: int) -> list[str]:
    """nvcc's flags for csrc/ops.cpp against the torch installed at ``torch_dir`` (its headers,
    its C++ ABI; its headers need C++20)."""
    api = torch_dir / "include" / "torch" / "csrc" / "api" / "include"
    return [
        "-std=c++20",
        "-O2",
        "-Xcompiler",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{torch_dir / 'include'}",
        f"-I{api}",
    ]


def ops_command() -> list[str] | str:
    """nvcc's command for the C++ ops against this Python's torch, or why there is none."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} has no CUDA"
    torch_dir = Path(torch.__file__).resolve().parent
    lib_dir = torch_dir / "lib"
    argv = [nvcc(), *ops_flags(torch_dir, int(torch._C._GLIBCXX_USE_CXX11_ABI)), "-shared"]
    argv += ["-x", "c++", str(CSRC / "ops.cpp"), f"-L{lib_dir}"]
    argv += ["-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda"]
    return [*argv, f"-Xlinker=-rpath={lib_dir}", "-o", str(EXTENSION)]


def direct_command() -> list[str] | str:
    """nvcc's command for the pybind11 entry into the ops (csrc/direct.cpp), or why there is none
    (it needs Python's headers, which a Python without its -dev package lacks)."""
    import sysconfig

    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} has no CUDA"
    python_include = Path(sysconfig.get_paths()["include"])
    if not (python_include / "Python.h").is_file():
        return f"no Python.h in {python_include} (install Python's development headers)"
    return direct_argv(Path(torch.__file__).resolve().parent, python_include, DIRECT)


def direct_argv(torch_dir: Path, python_include: Path, out: Path) -> list[str]:
    """The pybind11 module built as torch's own extensions are (its pybind11 ABI defines)."""
    import torch

    lib_dir = torch_dir / "lib"
    abi = [
        f'-DPYBIND11_{name}="{getattr(torch._C, f"_PYBIND11_{name}")}"'
        for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI")
        if getattr(torch._C, f"_PYBIND11_{name}", None)
    ]
    argv = [nvcc(), *ops_flags(torch_dir, int(torch._C._GLIBCXX_USE_CXX11_ABI)), "-shared"]
    argv += [f"-I{python_include}", *abi, "-x", "c++", str(CSRC / "direct.cpp"), f"-L{lib_dir}"]
    argv += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    return [*argv, f"-Xlinker=-rpath={lib_dir}", "-o", str(out)]


def run(name: str, argv: list[str] | str, optional: bool = False) -> tuple[str, bool | None, str]:
    """(name, built (None: an ``optional`` build skipped), log); a command that cannot be made
    (``argv`` says why) fails a build that is not optional."""
    if isinstance(argv, str):
        return name, None if optional else False, argv
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return name, done.returncode == 0, done.stderr if done.returncode else shlex.join(argv)


def jobs(manifest: dict, include: Path) -> list[Callable[[], tuple[str, bool | None, str]]]:
    """One build per kernel library, the shim where an entry needs it, and the C++ ops."""
    kernels = {e["name"]: e for e in manifest["kernels"] if e.get("kind", "kernel") != CUBLASLT}
    out: list[Callable[[], tuple[str, bool | None, str]]] = [
        lambda e=e: run(e["name"], command(e, manifest, include)) for e in kernels.values()
    ]
    if any(e.get("kind") == CUBLASLT for e in manifest["kernels"]):
        out.append(lambda: run("cublaslt shim", shim_command()))
    # without the C++ ops the Python ops serve (more host time per call): not a failure
    out.append(lambda: run("C++ ops", ops_command(), optional=True))
    # without it the ops are called through torch.ops (about 1.4 µs more host time a call)
    out.append(lambda: run("direct calls", direct_command(), optional=True))
    return out


def cuda_version(nvcc: str) -> int | None:
    """nvcc's CUDA version as 1000·major + 10·minor (as cuDriverGetVersion reports a driver's):
    the ops compare it with the driver's at load and fall back to torch.matmul when older."""
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"release (\d+)\.(\d+)", done.stdout)
    return int(found[1]) * 1000 + int(found[2]) * 10 if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemmforge_bundle.build")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    manifest = json.loads((PACKAGE / "kernels.json").read_text())
    (PACKAGE / "lib").mkdir(exist_ok=True)
    include = cutlass_include()
    version = cuda_version(nvcc())
    (PACKAGE / "lib" / "build.json").write_text(json.dumps({"cuda_version": version}))
    todo = jobs(manifest, include)
    print(f"building {len(todo)} libraries with {args.jobs} jobs", flush=True)
    failed = 0
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for name, ok, log in pool.map(lambda job: job(), todo):
            if ok is None:
                print(f"  skipped {name}: {log}", flush=True)
                continue
            print(f"  {'ok    ' if ok else 'FAILED'} {name}", flush=True)
            if not ok:
                failed += 1
                print(log[-4000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
