// The reference kernel in the gemmforge C ABI. Build with -DGEMMFORGE_LAYOUT_TN=1 for layout TN.
#include "reference_gemm.cuh"

GEMMFORGE_DEFINE_ABI_VERSION

GEMMFORGE_EXPORT size_t gemmforge_workspace_size(int, int, int) { return 0; }

GEMMFORGE_EXPORT int gemmforge_hgemm(const __half* A, const __half* B, __half* C, int M, int N,
                                     int K, void*, cudaStream_t stream) {
  return gemmforge_ref::launch<GEMMFORGE_LAYOUT_TN != 0>(A, B, C, M, N, K, stream);
}
