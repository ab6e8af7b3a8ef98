// A simple, correct HGEMM (fp32 accumulation) used to test the harness end to end.
// Not fast: 64x64 block tiles, 4x4 outputs per thread, any M, N, K (bounds-checked).
// The accumulator and the store are policies so that test fixtures can build known-bad variants
// from the same loop; the reference uses FloatAccumulator and PlainStore.
#pragma once
#include "gemmforge_abi.h"

namespace gemmforge_ref {

constexpr int kTile = 64;
constexpr int kTileK = 16;
constexpr int kThreads = 256;  // 16 x 16 threads, 4 x 4 outputs each

struct FloatAccumulator {
  float value = 0.f;
  __device__ void add(float product) { value += product; }
  __device__ void end_chunk() {}
  __device__ float result() const { return value; }
};

struct PlainStore {
  __device__ static void store(__half* C, int row, int col, int M, int N, float value) {
    C[size_t(row) * N + col] = __float2half_rn(value);
  }
};

// Whether a launched kernel does its work (a fixture's gate; the reference always does).
struct AlwaysRun {
  __device__ static bool run() { return true; }
};

template <bool kTN>
__device__ __forceinline__ float load_b(const __half* B, int k, int col, int N, int K) {
  return __half2float(kTN ? B[size_t(col) * K + k] : B[size_t(k) * N + col]);
}

template <bool kTN, class Accumulator, class Store, class Gate = AlwaysRun>
__global__ void __launch_bounds__(kThreads) tiled_gemm(const __half* __restrict__ A,
                                                       const __half* __restrict__ B,
                                                       __half* __restrict__ C, int M, int N,
                                                       int K) {
  if (!Gate::run()) return;
  __shared__ float a_tile[kTileK][kTile + 1];
  __shared__ float b_tile[kTileK][kTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  Accumulator acc[4][4];
  for (int k0 = 0; k0 < K; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += kThreads) {
      const int r = i / kTileK, kk = i % kTileK;
      const int row = row0 + r, k = k0 + kk;
      a_tile[kk][r] = (row < M && k < K) ? __half2float(A[size_t(row) * K + k]) : 0.f;
      const int col = col0 + r;
      b_tile[kk][r] = (col < N && k < K) ? load_b<kTN>(B, k, col, N, K) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j].add(a_tile[kk][ty * 4 + i] * b_tile[kk][tx * 4 + j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j].end_chunk();
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = row0 + ty * 4 + i, col = col0 + tx * 4 + j;
      if (row < M && col < N) Store::store(C, row, col, M, N, acc[i][j].result());
    }
}

template <bool kTN, class Accumulator = FloatAccumulator, class Store = PlainStore,
          class Gate = AlwaysRun>
int launch(const __half* A, const __half* B, __half* C, int M, int N, int K,
           cudaStream_t stream) {
  const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);
  tiled_gemm<kTN, Accumulator, Store, Gate><<<grid, kThreads, 0, stream>>>(A, B, C, M, N, K);
  return int(cudaGetLastError());
}

}  // namespace gemmforge_ref

#ifndef GEMMFORGE_LAYOUT_TN
#define GEMMFORGE_LAYOUT_TN 0
#endif
