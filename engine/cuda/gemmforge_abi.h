// The C ABI every gemmforge kernel library exposes (version 1).
//
// C (M x N) = A (M x K) . B, fp16 in and out, fp32 accumulation, all matrices row-major.
// B is K x N (layout NN) or N x K (layout TN); a library implements the layout it was built for.
// The harness owns every allocation and stream: a kernel launches only on `stream`, allocates
// nothing, creates no streams or threads and returns without synchronising.
//
//   gemmforge_hgemm            launches the GEMM; returns 0 (cudaSuccess) or a cudaError_t value.
//   gemmforge_workspace_size   bytes of device workspace hgemm needs for (M, N, K); the harness
//                              passes a buffer at least that large (or nullptr when 0).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#define GEMMFORGE_ABI_VERSION 1

#ifdef __cplusplus
#define GEMMFORGE_EXTERN extern "C"
#else
#define GEMMFORGE_EXTERN
#endif

#define GEMMFORGE_EXPORT GEMMFORGE_EXTERN __attribute__((visibility("default")))

GEMMFORGE_EXPORT int gemmforge_hgemm(const __half* A, const __half* B, __half* C, int M, int N,
                                     int K, void* workspace, cudaStream_t stream);
GEMMFORGE_EXPORT size_t gemmforge_workspace_size(int M, int N, int K);
GEMMFORGE_EXPORT int gemmforge_abi_version(void);

// Defines gemmforge_abi_version; put it once in each library's translation unit.
#define GEMMFORGE_DEFINE_ABI_VERSION \
  GEMMFORGE_EXPORT int gemmforge_abi_version(void) { return GEMMFORGE_ABI_VERSION; }
