// The bundle's cuBLASLt shim: runs one cuBLASLt algorithm pinned at campaign time, rebuilt from
// the configuration attributes the campaign recorded (engine.timing.cublaslt_kernels) and checked
// with cublasLtMatmulAlgoCheck for each problem before it is used. Row-major C = A.B is computed
// as column-major C^T = B^T.A^T, as the engine's baselines do (engine/cuda/baselines.cu).
//
// layout 0 (NN): B is K x N row-major; layout 1 (TN): B is N x K row-major.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Plan {
  int m = 0, n = 0, k = 0, layout = 0;
  std::vector<int64_t> config;
  size_t workspace = 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
};

cublasLtHandle_t g_lt = nullptr;
std::mutex g_mutex;
std::deque<Plan> g_plans;  // a deque: plans never move once made, so a plan id stays valid

int lt_status(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + int(s); }

// Sets configuration attribute `attr` of `algo` to `value`, at the width the library asks for.
cublasStatus_t set_config(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                          int64_t value) {
  size_t needed = 0;
  cublasStatus_t s = cublasLtMatmulAlgoConfigGetAttribute(algo, attr, nullptr, 0, &needed);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (needed == sizeof(uint16_t)) {
    uint16_t v = uint16_t(value);
    return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, sizeof v);
  }
  if (needed == sizeof(uint32_t)) {
    uint32_t v = uint32_t(value);
    return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, sizeof v);
  }
  if (needed == sizeof(uint64_t)) {
    uint64_t v = uint64_t(value);
    return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, sizeof v);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // namespace

// cuBLASLt's version (cublasLtGetVersion): a pinned algorithm is used only under the version it
// was recorded with.
EXPORT size_t gemmforge_lt_version(void) { return cublasLtGetVersion(); }

// Prepares the pinned algorithm for (M, N, K, layout): `config` holds the values of
// cublasLtMatmulAlgoConfigAttributes_t 0 .. count-1 as recorded (algo id first; -1: not
// recorded, left at the library's default). Returns a plan id (>= 0) and its workspace bytes in
// *workspace, or a negative code: -1 no handle, -2 bad config, -(1000 + cublasStatus_t) when the
// library rejects the algorithm for this problem (cublasLtMatmulAlgoInit or
// cublasLtMatmulAlgoCheck), -3 when the check says it cannot run. Host work only (no CUDA call
// on a stream), so it may run while a CUDA graph is captured.
EXPORT int gemmforge_lt_prepare(int M, int N, int K, int layout, const int64_t* config, int count,
                                size_t* workspace) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (config == nullptr || count < 1 || config[0] < 0) return -2;
  std::vector<int64_t> wanted(config, config + count);
  for (size_t i = 0; i < g_plans.size(); ++i) {  // plans are immutable: reuse an identical one
    const Plan& q = g_plans[i];
    if (q.m == M && q.n == N && q.k == K && q.layout == layout && q.config == wanted) {
      *workspace = q.workspace;
      return int(i);
    }
  }
  if (!g_lt && cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS) return -1;
  Plan p;
  p.m = M; p.n = N; p.k = K; p.layout = layout; p.config = wanted;
  cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return -(1000 + int(s));
  const cublasOperation_t op_b = layout == 0 ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = CUBLAS_OP_N;
  // Lt's "A" is our B^T (n x k), its "B" is our A^T (k x m), its "C" is our C^T (n x m).
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b));
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a));
  if (layout == 0)
    cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, N, K, N);
  else
    cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, K, N, K);
  cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, K, M, K);
  cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16F, N, M, N);
  s = cublasLtMatmulAlgoInit(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                             CUDA_R_16F, CUDA_R_16F, int(config[0]), &p.algo);
  for (int i = 1; s == CUBLAS_STATUS_SUCCESS && i < count; ++i) {
    if (config[i] < 0) continue;
    s = set_config(&p.algo, static_cast<cublasLtMatmulAlgoConfigAttributes_t>(i), config[i]);
  }
  cublasLtMatmulHeuristicResult_t checked;
  std::memset(&checked, 0, sizeof checked);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoCheck(g_lt, p.op, p.a, p.b, p.c, p.c, &p.algo, &checked);
  if (s != CUBLAS_STATUS_SUCCESS || checked.state != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
    return s != CUBLAS_STATUS_SUCCESS ? -(1000 + int(s)) : -3;
  }
  p.workspace = checked.workspaceSize;
  *workspace = p.workspace;
  g_plans.push_back(std::move(p));
  return int(g_plans.size() - 1);
}

// Runs plan `plan` on `stream`; `workspace` holds the bytes gemmforge_lt_prepare asked for.
// Returns 0 or 1000 + cublasStatus_t.
EXPORT int gemmforge_lt_hgemm(int plan, const __half* A, const __half* B, __half* C,
                              void* workspace, cudaStream_t stream) {
  const Plan* p;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (plan < 0 || plan >= int(g_plans.size())) return 1000 + int(CUBLAS_STATUS_INVALID_VALUE);
    p = &g_plans[plan];
  }
  const float alpha = 1.0f, beta = 0.0f;
  return lt_status(cublasLtMatmul(g_lt, p->op, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c,
                                  &p->algo, workspace, p->workspace, stream));
}
