"""The bundle's native side: the cuBLASLt shim and the C++ ops (csrc/) compile with nvcc; on a
GPU a built bundle loads its C++ ops, guards, dispatches to our kernel and to a pinned cuBLASLt
algorithm, and works under autograd, torch.compile and CUDA-graph capture (child process: the
ops register once per process)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from engine.codegen import Sm90Config
from engine.compilation.toolkit import CublasNotFound, find_cublas
from engine.problem import Problem
from engine.publish.bundle import CUBLASLT as CUBLASLT_KIND
from engine.publish.bundle import PACKAGE_DIR, BundleKernel, PinnedAlgo, unpack, write_bundle
from engine.timing.cublaslt_kernels import CONFIG_ATTRIBUTES


def build_module() -> ModuleType:
    """gemmforge_bundle/build.py on its own (importing the package would register the ops)."""
    spec = importlib.util.spec_from_file_location("bundle_build", PACKAGE_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nvcc(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_cublaslt_shim_compiles_and_links_against_cublaslt(tmp_path, monkeypatch):
    try:
        paths = find_cublas()
    except CublasNotFound as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("CUBLAS_HOME", str(paths.include_dir.parent))
    build = build_module()
    argv = build.shim_command()
    assert isinstance(argv, list), argv
    argv[argv.index("-o") + 1] = str(tmp_path / "shim.so")
    done = nvcc(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(tmp_path / "shim.so")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for name in ("gemmforge_lt_version", "gemmforge_lt_prepare", "gemmforge_lt_hgemm"):
        assert name in symbols


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_cpp_ops_compile_against_this_torchs_headers(tmp_path):
    import torch

    torch_dir = Path(torch.__file__).resolve().parent
    flags = build_module().ops_flags(torch_dir, int(torch._C._GLIBCXX_USE_CXX11_ABI))
    generated = torch_dir / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    if not generated.is_file():  # a CPU build of torch leaves out this generated header
        stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
        flags.append(f"-I{tmp_path / 'stub'}")
    source = PACKAGE_DIR / "csrc" / "ops.cpp"
    done = nvcc(["nvcc", *flags, "-c", "-x", "c++", str(source), "-o", "ops.o"], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]


# -- the direct calls: a pybind11 entry into the registered ops ----------------------------------
DIRECT_CHECKS = r"""
import shutil, sys, torch, gemmforge_bundle
from gemmforge_bundle import _ops
_ops.DIRECT.parent.mkdir(exist_ok=True)
shutil.copy(sys.argv[1], _ops.DIRECT)
direct = _ops._load_direct()  # the Python ops are registered here: the module calls them
x, w = torch.randn(6, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
print("linear", torch.equal(direct.linear(x, w), x @ w.t()))
print("matmul", torch.equal(direct.matmul(a, b), a @ b))
xg = x.clone().requires_grad_()
direct.linear(xg, w).sum().backward()
print("grad", torch.allclose(xg.grad, torch.ones(6, 5, dtype=torch.float64) @ w))
compiled = torch.compile(lambda x, w: torch.relu(direct.linear(x, w)), fullgraph=True)
print("compiled", torch.allclose(compiled(x, w), torch.relu(x @ w.t())))
"""


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_direct_calls_reach_the_ops_keep_autograd_and_compile_into_one_graph(tmp_path):
    import sysconfig

    import torch

    python_include = Path(sysconfig.get_paths()["include"])
    if not (python_include / "Python.h").is_file():
        pytest.skip(f"no Python.h in {python_include}")
    module = tmp_path / "gemmforge_direct.so"
    argv = build_module().direct_argv(Path(torch.__file__).resolve().parent, python_include, module)
    built = nvcc(argv, tmp_path)
    assert built.returncode == 0, built.stderr[-4000:]
    zipped = write_bundle([], tmp_path / "b.zip", environment={"gpu_name": "x"}, title="direct")
    root = unpack(zipped, tmp_path / "unpacked")
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-c", DIRECT_CHECKS, str(module)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == [
        "linear", "True", "matmul", "True", "grad", "True", "compiled", "True",
    ]  # fmt: skip


# -- a kernel that cannot run here: refused once, never launched again -------------------------
REFUSAL_DRIVER = r"""
#include <cstdio>
#include "launch_refusal.h"
using namespace gemmforge_ops;
int main() {
  for (int status : {0, 1, 35, 209, 222, 700, 803, 804, 1007, 1015}) {
    std::printf("verdict %d %d %d\n", status, int(launch_verdict(status, true)),
                int(launch_verdict(status, false)));
  }
  Refusals refusals;
  std::printf("before %d\n", int(refusals.refused(0)));
  const bool first = refusals.refuse(0);
  const bool second = refusals.refuse(0);
  std::printf("refuse %d %d\n", int(first), int(second));
  std::printf("after %d %d\n", int(refusals.refused(0)), int(refusals.refused(1)));
}
"""


@pytest.fixture(scope="module")
def refusal_driver(tmp_path_factory) -> dict[str, list[int]]:
    """The C++ ops' refusal logic (csrc/launch_refusal.h) driven by a small program: each output
    line's name and numbers."""
    tmp_path = tmp_path_factory.mktemp("refusal")
    (tmp_path / "driver.cpp").write_text(REFUSAL_DRIVER)
    argv = ["nvcc", "-std=c++17", "-x", "c++", f"-I{PACKAGE_DIR / 'csrc'}", "driver.cpp"]
    built = nvcc([*argv, "-o", "driver"], tmp_path)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True, check=True)
    lines: dict[str, list[int]] = {}
    for line in ran.stdout.splitlines():
        name, *numbers = line.split()
        key = f"{name} {numbers.pop(0)}" if name == "verdict" else name
        lines[key] = [int(n) for n in numbers]
    return lines


RAN, REFUSED, FAILED = 0, 1, 2  # gemmforge_ops::Verdict


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("status", "from_kernel", "from_shim"),
    [
        (0, RAN, RAN),
        (209, REFUSED, FAILED),  # no kernel image for this GPU
        (222, REFUSED, FAILED),  # PTX this driver cannot take
        (35, REFUSED, FAILED),  # a driver older than the runtime
        (803, REFUSED, FAILED),
        (804, REFUSED, FAILED),
        (1, FAILED, FAILED),  # an invalid value is an error to raise, not a refusal
        (700, FAILED, FAILED),  # an illegal address: never taken for "cannot run here"
        (1007, FAILED, FAILED),  # cuBLASLt's statuses come from the shim only
    ],
)
def test_only_a_kernels_cannot_run_here_statuses_are_refusals(
    refusal_driver, status, from_kernel, from_shim
):
    assert refusal_driver[f"verdict {status}"] == [from_kernel, from_shim]


@pytest.mark.nvcc
def test_a_refusal_is_remembered_per_device_and_only_the_first_one_warns(refusal_driver):
    assert refusal_driver["before"] == [0]
    assert refusal_driver["refuse"] == [1, 0]  # first record: warn; a racing second: silent
    assert refusal_driver["after"] == [1, 0]  # device 0 refused, device 1 still tries


REFUSING_KERNEL = r"""
#include <cstddef>
// A kernel library with gemmforge's C ABI whose every launch says "no kernel image for this
// GPU" (cudaErrorNoKernelImageForDevice), counting the launches it was asked for.
static int g_launches = 0;
extern "C" int gemmforge_hgemm(const void*, const void*, void*, int, int, int, void*, void*) {
  ++g_launches;
  return 209;
}
extern "C" size_t gemmforge_workspace_size(int, int, int) { return 0; }
extern "C" int launches(void) { return g_launches; }
"""

REFUSAL_CHECKS = """
import ctypes, sys, warnings, torch
warnings.simplefilter('always')  # every warning that reaches Python is printed (stderr)
torch.ops.load_library(sys.argv[1])
library = sys.argv[2]
torch.ops.gemmforge._add_entry(256, 512, 1, 1, 1024, 64, 'refuses', library, '', 0, [], '', 0)
h = dict(device='cuda', dtype=torch.float16)
x, w = torch.randn(64, 512, **h), torch.randn(256, 512, **h)
x2 = torch.randn(100, 512, **h)  # another M of the same bucket
outs = [torch.ops.gemmforge.hgemm_linear(x, w) for _ in range(3)]
outs.append(torch.ops.gemmforge.hgemm_linear(x2, w))
ref = torch.nn.functional.linear(x, w)
assert all(torch.equal(out, ref) for out in outs[:3]), 'fallback result'
assert torch.equal(outs[3], torch.nn.functional.linear(x2, w)), 'fallback result, other M'
count = ctypes.CDLL(library).launches()
assert count == 1, f'{count} launches: a refused kernel was tried again'
print('ok')
"""


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.slow
def test_the_cpp_ops_never_launch_again_a_kernel_that_cannot_run_on_this_gpu(tmp_path):
    build = build_module()
    argv = build.ops_command()
    assert isinstance(argv, list), argv
    ops = tmp_path / "gemmforge_ops.so"
    argv[argv.index("-o") + 1] = str(ops)
    done = nvcc(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    (tmp_path / "refuses.cu").write_text(REFUSING_KERNEL)
    kernel = tmp_path / "refuses.so"
    done = nvcc(
        ["nvcc", "-shared", "-Xcompiler", "-fPIC", "refuses.cu", "-o", str(kernel)], tmp_path
    )
    assert done.returncode == 0, done.stderr
    ran = subprocess.run(
        [sys.executable, "-c", REFUSAL_CHECKS, str(ops), str(kernel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().endswith("ok")
    # warned once, as a Python warning or on stderr (where TORCH_WARN goes when no Python
    # handler takes it)
    assert ran.stderr.count("cannot run on this GPU (CUDA error 209)") == 1, ran.stderr


OURS = Problem.parse("256x4096x4096", "tn")
PINNED = Problem.parse("512x1024x2048", "tn")

CHECKS = """
import sys, warnings, torch, gemmforge_bundle
from gemmforge_bundle import _ops
assert _ops.NATIVE, 'the C++ ops did not load'
assert (_ops.DIRECT_CALLS is not None) == DIRECT_BUILT, 'the direct calls'
torch.manual_seed(0)
h = dict(device='cuda', dtype=torch.float16)
def close(out, ref):
    return float((out.float() - ref).norm() / ref.norm()) < 1e-2
entry = torch.ops.gemmforge._entry_name
w = torch.randn(4096, 4096, **h)
w2 = torch.randn(1024, 2048, **h)
# every fallback warning ends on stderr, as a Python warning or, where no Python handler takes
# TORCH_WARN, as the C++ op wrote it; the markers split stderr for the test's counts
warnings.simplefilter('always')
def mark(name):
    print('@@' + name, file=sys.stderr, flush=True)
mark('kernels')
if True:
    for m in (1, 7, 100, 256, 511):  # our kernel, dynamic M with residues
        assert entry(m, 4096, 4096, 1) == OURS_NAME, m
        x = torch.randn(m, 4096, **h)
        assert close(gemmforge_bundle.linear(x, w), x.float() @ w.float().t()), m
    assert entry(512, 1024, 2048, 1) == PINNED_NAME
    x2 = torch.randn(512, 2048, **h)
    assert close(torch.ops.gemmforge.hgemm_linear(x2, w2), x2.float() @ w2.float().t())
    assert close(gemmforge_bundle.matmul(x2, w2.t()), x2.float() @ w2.float().t())
    torch.cuda.synchronize()
mark('compiled')
x = torch.randn(256, 4096, **h)
ref = x.float() @ w.float().t()
f = torch.compile(torch.ops.gemmforge.hgemm_linear, fullgraph=True)
assert close(f(x, w), ref), 'torch.compile'
class Mlp(torch.nn.Module):
    def forward(self, x, w, w2):
        return gemmforge_bundle.linear(torch.relu(gemmforge_bundle.linear(x, w)), w)
block = torch.compile(Mlp(), fullgraph=True)(x, w, w2)
assert close(block, torch.relu(ref.half()).float() @ w.float().t()), 'compiled block'
# autograd through the C++ op: torch.matmul's gradients
xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
g = torch.randn(256, 4096, **h)
gx, gw = torch.autograd.grad(torch.ops.gemmforge.hgemm_linear(xg, wg), (xg, wg), g)
rx, rw = torch.autograd.grad(torch.nn.functional.linear(xg, wg), (xg, wg), g)
assert close(gx, rx.float()) and close(gw, rw.float()), 'autograd'
# CUDA-graph capture, our kernel and the pinned algorithm (each shape called once before)
out = torch.ops.gemmforge.hgemm_linear(x, w)
out2 = torch.ops.gemmforge.hgemm_linear(x2, w2)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    out = torch.ops.gemmforge.hgemm_linear(x, w)
    out2 = torch.ops.gemmforge.hgemm_linear(x2, w2)
graph.replay(); torch.cuda.synchronize()
assert close(out, ref), 'graph capture: kernel'
assert close(out2, x2.float() @ w2.float().t()), 'graph capture: pinned algorithm'
# the guard: an entry built for another arch and an algorithm pinned under another cuBLASLt
# version fall back to torch.matmul, with one warning for both
library = str(_ops.LIB_DIR / (OURS_NAME + '.so'))
add = torch.ops.gemmforge._add_entry
add(256, 512, 1, 1, 64, 64, 'other_arch', library, 'sm_80', 0, [], '', 0)
add(256, 1024, 1, 1, 64, 64, 'other_lt', str(_ops.SHIM), '', 0, PINNED_ALGO, '', 1)
a, b = torch.randn(64, 512, **h), torch.randn(256, 512, **h)
c, d = torch.randn(64, 1024, **h), torch.randn(256, 1024, **h)
mark('guard')
y1 = torch.ops.gemmforge.hgemm_linear(a, b)
y2 = torch.ops.gemmforge.hgemm_linear(c, d)
torch.cuda.synchronize()
mark('end')
assert torch.equal(y1, torch.nn.functional.linear(a, b))
assert torch.equal(y2, torch.nn.functional.linear(c, d))
print('ok')
"""


def fallback_warnings(stderr: str) -> dict[str, list[str]]:
    """The fallback warnings on each stretch of the checks' stderr, keyed by the marker that
    opens the stretch."""
    stretches: dict[str, list[str]] = {}
    current = ""
    for line in stderr.splitlines():
        if line.startswith("@@"):
            current = line[2:]
            stretches[current] = []
        elif "gemmforge: falling back" in line and current:
            stretches[current].append(line)
    return stretches


def pinned_algo(problem: Problem) -> tuple[PinnedAlgo, int]:
    """cuBLASLt's first heuristic algorithm for ``problem`` on this GPU, read through the engine's
    shim as the finals record it, and the cuBLASLt version."""
    from engine.config import load as load_config
    from engine.timing.baselines import LT_WORKSPACE_BYTES
    from engine.timing.measure import load_shim

    shim = load_shim(load_config())
    plan, count = shim.cublaslt_plan(problem.m, problem.n, problem.k, True, LT_WORKSPACE_BYTES, 4)
    assert count > 0
    config = shim.cublaslt_algo_config(plan, 0, len(CONFIG_ATTRIBUTES))
    return PinnedAlgo(tuple(config), "heuristic 0"), shim.cublaslt_version


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.slow
def test_a_built_bundle_runs_its_cpp_ops_on_kernels_and_a_pinned_algorithm(tmp_path: Path):
    import torch

    config = next(
        c for c in Sm90Config.candidates(OURS.layout) if c.is_valid(OURS) and c.splits == 1
    )
    ours = BundleKernel(
        problem=OURS,
        name=config.name,
        source=config.render(),
        archs=tuple(config.archs),
        m_lo=1,
        m_hi=511,
    )
    algo, version = pinned_algo(PINNED)
    pinned = BundleKernel(
        problem=PINNED,
        name=f"cublaslt_{PINNED.key}",
        source="",
        archs=(),
        kind=CUBLASLT_KIND,
        algo=algo,
        m_lo=512,
        m_hi=512,
    )
    environment = {"gpu_name": torch.cuda.get_device_name(0), "cublaslt_version": str(version)}
    out = write_bundle([ours, pinned], tmp_path / "b.zip", environment=environment, title="gpu")
    root = unpack(out, tmp_path / "unpacked")
    pythonpath = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    with contextlib.suppress(CublasNotFound):
        env.setdefault("CUBLAS_HOME", str(find_cublas().include_dir.parent))
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
    assert "ok     C++ ops" in built.stdout, built.stdout
    code = (
        f"OURS_NAME = {config.name!r}\nPINNED_NAME = {pinned.name!r}\n"
        f"PINNED_ALGO = {list(algo.config)!r}\n"
        f"DIRECT_BUILT = {'ok     direct calls' in built.stdout}\n" + CHECKS
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")
