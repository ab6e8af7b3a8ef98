// gemmforge sanitizer harness: loads a kernel library (the C ABI of gemmforge_abi.h) and calls it
// on one problem, so that compute-sanitizer (memcheck, racecheck, initcheck) can watch exactly
// the candidate's own kernels -- no framework kernels, no JIT, one small process.
//   usage: sanitize_main LIB.so M N K nn|tn
// Exit status: 0 = the calls returned success, 2 = usage or setup error, 3 = the library failed
// (an error after it had launched work, or with the device reporting an error), 4 = the library
// refused the problem: its first call returned an error with nothing pending on the device, and
// the same call made again under stream capture launches nothing (a kernel built for divisible
// shapes, asked for another).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gemmforge_abi.h"

typedef int (*HgemmFn)(const __half*, const __half*, __half*, int, int, int, void*, cudaStream_t);
typedef size_t (*WorkspaceFn)(int, int, int);

__global__ void fill(__half* data, size_t count, unsigned seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < count) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    data[i] = __float2half(float((x >> 9) & 0xff) / 256.0f - 0.5f);
  }
}

// Kernel launches, memsets and copies one more call puts on ``stream``, counted by capturing
// the call into a graph instead of running it; -1 when the capture failed (the call did what a
// capture does not allow).
static long long captured_work(HgemmFn hgemm, const __half* a, const __half* b, __half* c, int m,
                               int n, int k, void* workspace, cudaStream_t stream) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) return -1;
  hgemm(a, b, c, m, n, k, workspace, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  size_t nodes = 0;
  const bool counted = ended == cudaSuccess && graph != nullptr &&
                       cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess;
  if (graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  return counted ? (long long)nodes : -1;
}

static bool ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s LIB.so M N K nn|tn\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto hgemm = reinterpret_cast<HgemmFn>(dlsym(lib, "gemmforge_hgemm"));
  auto workspace_size = reinterpret_cast<WorkspaceFn>(dlsym(lib, "gemmforge_workspace_size"));
  if (hgemm == nullptr || workspace_size == nullptr) {
    std::fprintf(stderr, "the library does not export the gemmforge ABI\n");
    return 2;
  }
  const int m = std::atoi(argv[2]), n = std::atoi(argv[3]), k = std::atoi(argv[4]);
  if (m <= 0 || n <= 0 || k <= 0 || (std::strcmp(argv[5], "nn") && std::strcmp(argv[5], "tn"))) {
    std::fprintf(stderr, "bad problem %s x %s x %s %s\n", argv[2], argv[3], argv[4], argv[5]);
    return 2;
  }
  const size_t a_count = size_t(m) * k, b_count = size_t(k) * n, c_count = size_t(m) * n;
  __half *a = nullptr, *b = nullptr, *c = nullptr;
  void* workspace = nullptr;
  const size_t ws_bytes = workspace_size(m, n, k);
  cudaStream_t stream;
  if (!ok(cudaMalloc(&a, a_count * 2), "cudaMalloc A") ||
      !ok(cudaMalloc(&b, b_count * 2), "cudaMalloc B") ||
      !ok(cudaMalloc(&c, c_count * 2), "cudaMalloc C") ||
      (ws_bytes && !ok(cudaMalloc(&workspace, ws_bytes), "cudaMalloc workspace")) ||
      !ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
    return 2;
  }
  fill<<<unsigned((a_count + 255) / 256), 256, 0, stream>>>(a, a_count, 1u);
  fill<<<unsigned((b_count + 255) / 256), 256, 0, stream>>>(b, b_count, 2u);
  if (!ok(cudaStreamSynchronize(stream), "fill")) return 2;
  for (int call = 0; call < 2; ++call) {
    int status = hgemm(a, b, c, m, n, k, workspace, stream);
    if (status == 0) continue;
    const cudaError_t pending = cudaPeekAtLastError();
    const cudaError_t synced = cudaStreamSynchronize(stream);
    const bool clean = pending == cudaSuccess && synced == cudaSuccess;
    const long long work = call == 0 && clean ? captured_work(hgemm, a, b, c, m, n, k, workspace,
                                                              stream)
                                              : -1;
    if (work == 0) {
      std::fprintf(stderr, "gemmforge_hgemm refused %dx%dx%d %s: returned %d before launching\n",
                   m, n, k, argv[5], status);
      return 4;
    }
    const char* why = !clean    ? "the device reported an error"
                      : call > 0  ? "after it had accepted the problem"
                      : work > 0  ? "after launching work"
                                  : "its launches could not be counted under stream capture";
    std::fprintf(stderr, "gemmforge_hgemm returned %d on call %d: %s (%s)\n", status, call, why,
                 cudaGetErrorString(synced != cudaSuccess ? synced : pending));
    return 3;
  }
  if (!ok(cudaStreamSynchronize(stream), "synchronize after the calls")) return 3;
  std::printf("ok\n");
  return 0;
}
