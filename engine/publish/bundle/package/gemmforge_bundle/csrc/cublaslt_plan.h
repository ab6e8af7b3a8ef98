// How gemmforge hands one row-major fp16 problem to cuBLASLt: the matmul description (fp32
// compute and scale), its three matrix layouts and the call that runs an algorithm on them.
// Shared by the bundle's cuBLASLt shim (cublaslt_shim.cu) and the engine's baselines
// (engine/cuda/baselines.cu, which the engine builds with this file's text in place of its
// include), so that an algorithm picked by the engine runs on the same problem in the bundle.
//
// Row-major C = A.B is computed as column-major C^T = B^T.A^T.
// layout 0 (NN): B is K x N row-major; layout 1 (TN): B is N x K row-major.
//
// Include guards rather than #pragma once: the engine builds baselines.cu with this text inside
// the main file, where #pragma once draws a warning.
#ifndef GEMMFORGE_CUBLASLT_PLAN_H
#define GEMMFORGE_CUBLASLT_PLAN_H

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace gemmforge_lt {

// One problem as cuBLASLt sees it. Lt's "A" is our B^T (n x k), its "B" is our A^T (k x m), its
// "C" (and "D") is our C^T (n x m).
struct Operation {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
};

// 0 for success, else 1000 + the cublasStatus_t: the codes both libraries' entry points return.
inline int status_code(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + int(s); }

// Describes the (M, N, K, layout) problem into *out. Returns the status of creating the matmul
// description; on failure nothing else is created. The layouts' and attributes' statuses go
// unchecked: with valid arguments they fail only when host memory runs out.
inline cublasStatus_t create_operation(int M, int N, int K, int layout, Operation* out) {
  cublasStatus_t s = cublasLtMatmulDescCreate(&out->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const cublasOperation_t op_b = layout == 0 ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(out->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b));
  cublasLtMatmulDescSetAttribute(out->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a));
  if (layout == 0)
    cublasLtMatrixLayoutCreate(&out->a, CUDA_R_16F, N, K, N);
  else
    cublasLtMatrixLayoutCreate(&out->a, CUDA_R_16F, K, N, K);
  cublasLtMatrixLayoutCreate(&out->b, CUDA_R_16F, K, M, K);
  cublasLtMatrixLayoutCreate(&out->c, CUDA_R_16F, N, M, N);
  return CUBLAS_STATUS_SUCCESS;
}

inline void destroy_operation(Operation* operation) {
  cublasLtMatrixLayoutDestroy(operation->a);
  cublasLtMatrixLayoutDestroy(operation->b);
  cublasLtMatrixLayoutDestroy(operation->c);
  cublasLtMatmulDescDestroy(operation->op);
  *operation = Operation{};
}

// Runs `algo` on the operation: C = A.B (row-major, fp16), alpha 1, beta 0, on `stream`.
inline cublasStatus_t matmul(cublasLtHandle_t lt, const Operation& operation,
                             const cublasLtMatmulAlgo_t* algo, const __half* A, const __half* B,
                             __half* C, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(lt, operation.op, &alpha, B, operation.a, A, operation.b, &beta, C,
                        operation.c, C, operation.c, algo, workspace, workspace_bytes, stream);
}

}  // namespace gemmforge_lt

#endif  // GEMMFORGE_CUBLASLT_PLAN_H
