// The bundle's cuBLASLt shim: runs one cuBLASLt algorithm pinned at campaign time, rebuilt from
// the configuration attributes the campaign recorded (engine.timing.cublaslt_kernels) and checked
// with cublasLtMatmulAlgoCheck for each problem before it is used. The problem is described to
// cuBLASLt as the engine's baselines describe it (cublaslt_plan.h, which both include).
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "cublaslt_plan.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Plan {
  int m = 0, n = 0, k = 0, layout = 0;
  std::vector<int64_t> config;
  size_t workspace = 0;
  gemmforge_lt::Operation lt;
  cublasLtMatmulAlgo_t algo;
};

cublasLtHandle_t g_lt = nullptr;
std::mutex g_mutex;
std::deque<Plan> g_plans;  // a deque: plans never move once made, so a plan id stays valid

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
  cublasStatus_t s = gemmforge_lt::create_operation(M, N, K, layout, &p.lt);
  if (s != CUBLAS_STATUS_SUCCESS) return -(1000 + int(s));
  s = cublasLtMatmulAlgoInit(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                             CUDA_R_16F, CUDA_R_16F, int(config[0]), &p.algo);
  for (int i = 1; s == CUBLAS_STATUS_SUCCESS && i < count; ++i) {
    if (config[i] < 0) continue;
    s = set_config(&p.algo, static_cast<cublasLtMatmulAlgoConfigAttributes_t>(i), config[i]);
  }
  cublasLtMatmulHeuristicResult_t checked;
  std::memset(&checked, 0, sizeof checked);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoCheck(g_lt, p.lt.op, p.lt.a, p.lt.b, p.lt.c, p.lt.c, &p.algo, &checked);
  if (s != CUBLAS_STATUS_SUCCESS || checked.state != CUBLAS_STATUS_SUCCESS) {
    gemmforge_lt::destroy_operation(&p.lt);
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
  return gemmforge_lt::status_code(
      gemmforge_lt::matmul(g_lt, p->lt, &p->algo, A, B, C, workspace, p->workspace, stream));
}
