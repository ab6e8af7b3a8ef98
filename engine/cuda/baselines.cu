// NVIDIA library baselines behind the same kind of C entry points as candidate kernels, so that a
// baseline call from Python costs the same host overhead as a candidate call (one ctypes call,
// one library launch). Row-major C = A.B is computed as column-major C^T = B^T.A^T.
//
// layout 0 (NN): B is K x N row-major; layout 1 (TN): B is N x K row-major.
//
// cublaslt_plan.h is the bundle's (engine/publish/bundle/package/gemmforge_bundle/csrc/): its
// cuBLASLt shim runs the algorithms picked here on the same description of the problem.
// engine.timing.baselines.shim_source puts the header's text in place of its include, so the
// compile cache's key (the source text) covers it.
#include <cublas_v2.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cublaslt_plan.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxPlans = 4096;
constexpr int kMaxAlgos = 100;

cublasHandle_t g_blas = nullptr;
cublasLtHandle_t g_lt = nullptr;
std::mutex g_mutex;

struct LtPlan {
  int m = 0, n = 0, k = 0, layout = 0;
  size_t workspace = 0;
  int requested = 0;
  gemmforge_lt::Operation lt;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
};

LtPlan g_plans[kMaxPlans];
int g_plan_count = 0;

int blas_status(cublasStatus_t s) { return gemmforge_lt::status_code(s); }

}  // namespace

// Creates the library handles outside any timed region. Returns 0 or an error code.
EXPORT int baselines_init(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_blas) {
    if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasSetMathMode(g_blas, CUBLAS_DEFAULT_MATH);
  }
  if (!g_lt && cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS) return 2;
  return 0;
}

EXPORT size_t baselines_cublas_version(void) { return cublasLtGetVersion(); }

// cublasGemmEx with fp32 compute. The workspace is handed to cuBLAS so that it never allocates
// (required under CUDA-graph capture).
EXPORT int cublas_hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K,
                        void* workspace, size_t workspace_bytes, int layout, cudaStream_t stream) {
  cublasStatus_t s = cublasSetStream(g_blas, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  if (workspace_bytes) {
    s = cublasSetWorkspace(g_blas, workspace, workspace_bytes);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasOperation_t op_b = layout == 0 ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int ldb = layout == 0 ? N : K;
  s = cublasGemmEx(g_blas, op_b, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16F, ldb, A, CUDA_R_16F,
                   K, &beta, C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return blas_status(s);
}

// Builds a cuBLASLt plan for (M, N, K, layout) and asks the heuristic for up to `max_algos`
// algorithms that fit `workspace_bytes`. Returns the plan id (>= 0) or a negative error code;
// *algo_count receives the number of algorithms found.
EXPORT int cublaslt_plan(int M, int N, int K, int layout, size_t workspace_bytes, int max_algos,
                         int* algo_count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_lt) return -1;
  if (max_algos > kMaxAlgos) max_algos = kMaxAlgos;
  for (int i = 0; i < g_plan_count; ++i) {  // plans are immutable: reuse an identical one
    const LtPlan& q = g_plans[i];
    if (q.m == M && q.n == N && q.k == K && q.layout == layout && q.workspace == workspace_bytes &&
        q.requested == max_algos) {
      *algo_count = int(q.algos.size());
      return i;
    }
  }
  if (g_plan_count >= kMaxPlans) return -2;
  LtPlan& p = g_plans[g_plan_count];
  p.m = M; p.n = N; p.k = K; p.layout = layout; p.workspace = workspace_bytes;
  p.requested = max_algos;
  if (gemmforge_lt::create_operation(M, N, K, layout, &p.lt) != CUBLAS_STATUS_SUCCESS) return -3;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  p.algos.resize(max_algos);
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(g_lt, p.lt.op, p.lt.a, p.lt.b, p.lt.c, p.lt.c,
                                                    pref, max_algos, p.algos.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) return -(1000 + int(s));
  p.algos.resize(found);
  *algo_count = found;
  return g_plan_count++;
}

// Workspace bytes algorithm `algo` of plan `plan` asks for.
EXPORT size_t cublaslt_algo_workspace(int plan, int algo) {
  return g_plans[plan].algos[algo].workspaceSize;
}

// What kernel algorithm `algo` of plan `plan` is: its cublasLtMatmulAlgoConfigAttributes_t values
// 0 .. count-1 (algo id, tile id, split-K, reduction scheme, CTA swizzling, custom option, stages
// id, inner shape id, cluster shape id), each widened to int64; -1 where the library does not
// report one. The attributes differ in width (int32, uint32, uint16), so each is sized first.
// Returns the number of values written, or -1 for a bad plan or algo.
EXPORT int cublaslt_algo_config(int plan, int algo, int64_t* values, int count) {
  if (plan < 0 || plan >= g_plan_count || algo < 0 ||
      algo >= int(g_plans[plan].algos.size()) || values == nullptr) {
    return -1;
  }
  const cublasLtMatmulAlgo_t* a = &g_plans[plan].algos[algo].algo;
  for (int i = 0; i < count; ++i) {
    const auto attr = static_cast<cublasLtMatmulAlgoConfigAttributes_t>(i);
    size_t needed = 0;
    values[i] = -1;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, nullptr, 0, &needed) !=
            CUBLAS_STATUS_SUCCESS ||
        needed == 0 || needed > sizeof(uint64_t)) {
      continue;
    }
    unsigned char buffer[sizeof(uint64_t)] = {};
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, buffer, needed, &written) !=
        CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    if (needed == sizeof(uint16_t)) {
      uint16_t v;
      memcpy(&v, buffer, sizeof v);
      values[i] = int64_t(v);
    } else if (needed == sizeof(uint32_t)) {
      uint32_t v;  // int32 attributes (algo id, split-K) are never negative
      memcpy(&v, buffer, sizeof v);
      values[i] = int64_t(v);
    } else {
      int64_t v;
      memcpy(&v, buffer, sizeof v);
      values[i] = v;
    }
  }
  return count;
}

EXPORT int cublaslt_hgemm(int plan, int algo, const __half* A, const __half* B, __half* C,
                          void* workspace, cudaStream_t stream) {
  const LtPlan& p = g_plans[plan];
  return blas_status(gemmforge_lt::matmul(g_lt, p.lt, &p.algos[algo].algo, A, B, C, workspace,
                                          p.workspace, stream));
}

// An empty exported call: the floor of the ctypes call path, for the host-overhead report.
EXPORT int baselines_noop(const __half*, const __half*, __half*, int, int, int, void*,
                          cudaStream_t) {
  return 0;
}
