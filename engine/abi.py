"""The kernel C ABI, as Python sees it: symbol names and the header that declares them."""

from __future__ import annotations

from pathlib import Path

ABI_VERSION = 1
CUDA_DIR = Path(__file__).resolve().parent / "cuda"
HEADER = CUDA_DIR / "gemmforge_abi.h"

ENTRY_SYMBOL = "gemmforge_hgemm"
WORKSPACE_SYMBOL = "gemmforge_workspace_size"
VERSION_SYMBOL = "gemmforge_abi_version"
REQUIRED_SYMBOLS = (ENTRY_SYMBOL, WORKSPACE_SYMBOL, VERSION_SYMBOL)

CONTRACT = """\
Implement, in one CUDA C++ file that includes "gemmforge_abi.h":
  extern "C" int gemmforge_hgemm(const __half* A, const __half* B, __half* C,
                                 int M, int N, int K, void* workspace, cudaStream_t stream);
  extern "C" size_t gemmforge_workspace_size(int M, int N, int K);
  GEMMFORGE_DEFINE_ABI_VERSION
C (MxN) = A (MxK) . B with fp16 inputs/outputs and fp32 accumulation, row-major matrices;
B is KxN for layout NN and NxK for layout TN. Launch only on `stream`; allocate nothing;
create no streams or threads; do not synchronise; return 0 or the cudaError_t of the launch.
"""
