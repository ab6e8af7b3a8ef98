"""Family sm80: CuTe multistage mma.sync GEMMs that run on Ampere, Ada and Hopper.

Built on CUTLASS's ``MainloopSm80CpAsync`` collective (cp.async multistage pipeline, swizzled
shared memory, ldmatrix, ``mma.sync.m16n8k16`` fp32-accumulate) inside our own kernel, which adds
CTA rasterisation (block swizzle) and split-K. Knobs: CTA tile M×N×K, warp layout, stages, block
swizzle, split-K factor (clamped at run time to the number of K tiles) and how the splits are
reduced:

  kernel   fp32 partials in the workspace, then a fixed-order reduction kernel that rounds once
           to fp16 (two launches);
  pdl      the same two kernels, the reduction launched with programmatic dependent launch
           (sm_90): it is scheduled while the GEMM runs and waits for it on the GPU, so the gap
           between the launches is hidden;
  cluster  one launch, no workspace (sm_90): the splits of an output tile form a thread-block
           cluster, and each CTA sums its share of the tile over the cluster's accumulators
           through distributed shared memory, in the same split order as the reduction kernel
           (so the result is bitwise the same).

Libraries are compiled for sm_80 and sm_90 (sm_80 SASS runs on sm_86/sm_89 but not on Hopper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from engine.codegen.base import VALID, KernelConfig, Validity, invalid
from engine.problem import Layout, Problem

# Dynamic shared memory a block may opt in to, per arch.
SMEM_LIMIT = {
    "sm_80": 166912,  # A100 (163 KiB)
    "sm_86": 101376,  # 99 KiB
    "sm_89": 101376,
    "sm_90": 232448,  # H100/H200 (227 KiB)
    "sm_90a": 232448,
}
MAX_ACCUMULATORS = 128  # fp32 accumulators per thread
MAX_WARPS = 8
MAX_CLUSTER_SPLITS = 16  # CTAs per cluster on Hopper (above 8 is a non-portable cluster size)
HOPPER_ARCHS = ("sm_90", "sm_90a")

B_KMAJOR = """\
// B (TN) is K-major in the (N, K) view: the same operand setup as A.
using SmemLayoutAtomB = SmemLayoutAtomA;
using SmemCopyAtomB = Copy_Atom<SM75_U32x4_LDSM_N, Half>;
using GmemTiledCopyB = decltype(make_tiled_copy(
    Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Half>{},
    Layout<Shape<Int<kThreads / (kTileK / 8)>, Int<kTileK / 8>>, Stride<Int<kTileK / 8>, _1>>{},
    Layout<Shape<_1, _8>>{}));"""

B_NMAJOR = """\
// B (NN) is N-major in the (N, K) view: 16-byte cp.async along N, N-major swizzled smem atoms,
// transposing ldmatrix.
constexpr int kAtomN = kTileN % 64 == 0 ? 64 : 32;
using SmemLayoutAtomB =
    decltype(composition(Swizzle<kAtomN == 64 ? 3 : 2, 3, 3>{},
                         Layout<Shape<Int<kAtomN>, _8>, Stride<_1, Int<kAtomN>>>{}));
using SmemCopyAtomB = Copy_Atom<SM75_U16x8_LDSM_T, Half>;
using GmemTiledCopyB = decltype(make_tiled_copy(
    Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Half>{},
    Layout<Shape<Int<kTileN / 8>, Int<kThreads / (kTileN / 8)>>, Stride<_1, Int<kTileN / 8>>>{},
    Layout<Shape<_8, _1>>{}));"""


# -- split-K reductions other than the default two launches (sm_90) ------------------------------
# Each is C++ spliced into the template at points where the default renders nothing, so a
# ``reduction="kernel"`` source is byte-for-byte what it was before these existed (finals are kept
# under each source's hash).

SPLIT_LAUNCH = "  if (partial) return int(launch_split_k(p, C, workspace, device, stream));\n"
TILE_GRID = """\
  const int group = 1 << kSwizzleLog2;
  const dim3 grid(unsigned(p.tiles_m) * group, unsigned((p.tiles_n + group - 1) / group),
                  unsigned(p.splits));"""

PDL_DEVICE_CODE = """

// Programmatic dependent launch (sm_90): each GEMM CTA lets the reduction be scheduled as soon
// as it starts; the reduction waits on the GPU until the whole GEMM has finished and its
// partials are visible, so the launch gap between the two kernels is hidden.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}
__device__ __forceinline__ void wait_for_gemm() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}"""

PDL_LAUNCH = f"""\
// The GEMM, then the reduction launched with programmatic stream serialization.
cudaError_t launch_split_k(Params p, __half* C, void* workspace, int device,
                           cudaStream_t stream) {{
  if (workspace == nullptr) return cudaErrorInvalidValue;
  cudaError_t err = prepare<true>(device);
  if (err != cudaSuccess) return err;
  p.C = C;
  p.partials = static_cast<float*>(workspace);
{TILE_GRID}
  gemm_kernel<true><<<grid, kThreads, kSmemBytes, stream>>>(p);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  const int64_t plane = int64_t(p.M) * p.N, groups = plane / 8;
  int64_t blocks = (groups + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {{}};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, reduce_splits, static_cast<const float*>(workspace), C,
                            groups, plane, p.splits);
}}
"""

CLUSTER_TILE_PAD = 8  # floats per row of the parked tile: its float2 stores are conflict-free

CLUSTER_DEVICE_CODE = f"""
constexpr int kTileStride = kTileN + {CLUSTER_TILE_PAD};  // floats per row of the parked tile
constexpr int kTileBytes = kTileM * kTileStride * int(sizeof(float));
constexpr int kClusterSmemBytes = kSmemBytes > kTileBytes ? kSmemBytes : kTileBytes;

// Split-K inside a thread-block cluster (sm_90): the cluster's CTAs are the splits of one output
// tile. Each parks its fp32 accumulators in its own shared memory; after a cluster barrier CTA r
// sums its share of the tile over every CTA's copy through distributed shared memory, in split
// order from zero as reduce_splits does, and writes fp16. The second barrier keeps each CTA's
// shared memory alive until the others have read it.
template <class Accumulators>
__device__ void reduce_in_cluster(__half* C, int M, int N, int tile_m, int tile_n,
                                  Accumulators const& acc, TiledMma const& tiled_mma, char* smem) {{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  float* tile = reinterpret_cast<float*>(smem);
  cp_async_wait<0>();
  __syncthreads();  // the mainloop's last shared-memory reads are done before the tile lands
  store_tile(tile, kTileM, kTileStride, 0, 0, acc, tiled_mma);
  cluster.sync();
  const int splits = int(cluster.num_blocks());
  const int rank = int(cluster.block_rank());
  constexpr int kQuadsPerRow = kTileN / 4;
  constexpr int kQuads = kTileM * kQuadsPerRow;
  const int end = (rank + 1) * kQuads / splits;
  for (int q = rank * kQuads / splits + int(threadIdx.x); q < end; q += kThreads) {{
    const int r = q / kQuadsPerRow, c = (q % kQuadsPerRow) * 4;
    // every peer's load first, all in flight at once; then the sum, in split order
    float4 part[kMaxSplits];
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kMaxSplits; ++s) {{
      if (s < splits) {{
        const float* peer = cluster.map_shared_rank(tile, s);
        part[s] = *reinterpret_cast<const float4*>(peer + r * kTileStride + c);
      }}
    }}
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kMaxSplits; ++s) {{
      if (s < splits) sum.x += part[s].x, sum.y += part[s].y, sum.z += part[s].z,
                      sum.w += part[s].w;
    }}
    const int row = tile_m * kTileM + r, col = tile_n * kTileN + c;
    if (row < M && col < N) {{  // N % 8 == 0: a group of 4 is all in or all out
      __half2* dst = reinterpret_cast<__half2*>(C + int64_t(row) * N + col);
      dst[0] = __floats2half2_rn(sum.x, sum.y);
      dst[1] = __floats2half2_rn(sum.z, sum.w);
    }}
  }}
  cluster.sync();
#endif
}}"""

CLUSTER_LAUNCH = f"""\
// One launch, no workspace: the splits of each output tile form a cluster along z.
cudaError_t launch_split_k(Params p, __half* C, void*, int device, cudaStream_t stream) {{
  static bool ready[64] = {{}};
  if (device < 0 || device >= 64) return cudaErrorInvalidDevice;
  if (!ready[device]) {{
    cudaError_t err = cudaFuncSetAttribute(
        gemm_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kClusterSmemBytes);
    if (err == cudaSuccess && kMaxSplits > 8) {{  // 16 CTAs is a non-portable cluster size
      err = cudaFuncSetAttribute(gemm_kernel<true>,
                                 cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }}
    if (err != cudaSuccess) return err;
    ready[device] = true;
  }}
  p.C = C;
  p.partials = nullptr;
{TILE_GRID}
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 1;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = unsigned(p.splits);
  cudaLaunchConfig_t config = {{}};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kClusterSmemBytes;
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, gemm_kernel<true>, p);
}}
"""

REDUCTION_SUBSTITUTIONS: dict[str, dict[str, str]] = {
    "kernel": {
        "reduction_summary": "",
        "reduction_includes": "",
        "reduction_device_code": "",
        "gemm_prologue": "",
        "partial_epilogue": "",
        "reduce_prologue": "",
        "workspace_override": "",
        "split_launch_code": "",
        "split_launch": "",
    },
    "pdl": {
        "reduction_summary": (
            "\n// The reduction is launched with programmatic dependent launch (sm_90)."
        ),
        "reduction_includes": "",
        "reduction_device_code": PDL_DEVICE_CODE,
        "gemm_prologue": "  if constexpr (kPartial) allow_dependent_launch();\n",
        "partial_epilogue": "",
        "reduce_prologue": "  wait_for_gemm();\n",
        "workspace_override": "",
        "split_launch_code": PDL_LAUNCH,
        "split_launch": SPLIT_LAUNCH,
    },
    "cluster": {
        "reduction_summary": (
            "\n// Not here: this variant reduces the splits of a tile inside a thread-block "
            "cluster,\n// through distributed shared memory, in one launch and without workspace."
        ),
        "reduction_includes": "\n#include <cooperative_groups.h>",
        "reduction_device_code": CLUSTER_DEVICE_CODE,
        "gemm_prologue": "",
        "partial_epilogue": (
            "  if constexpr (kPartial) {\n"
            "    reduce_in_cluster(p.C, p.M, p.N, tile_m, tile_n, accumulators, tiled_mma, smem);\n"
            "    return;\n"
            "  }\n"
        ),
        "reduce_prologue": "",
        "workspace_override": "  return 0;  // the splits are reduced in shared memory\n",
        "split_launch_code": CLUSTER_LAUNCH,
        "split_launch": SPLIT_LAUNCH,
    },
}


@dataclass(frozen=True)
class Sm80Config(KernelConfig):
    FAMILY: ClassVar[str] = "sm80"
    ARCHS: ClassVar[tuple[str, ...]] = ("sm_80", "sm_90")
    TEMPLATE: ClassVar[str] = "sm80.cu.tmpl"
    SPACE: ClassVar[dict[str, tuple[object, ...]]] = {
        "tile_m": (32, 64, 128, 256),
        "tile_n": (32, 64, 128, 256),
        "tile_k": (32, 64),
        "warp_m": (1, 2, 4),
        "warp_n": (1, 2, 4),
        "stages": (2, 3, 4, 5),
        "swizzle": (1, 2, 4, 8),
        "splits": (1, 2, 3, 4, 8, 16, 32),
        "reduction": ("kernel", "pdl", "cluster"),
    }

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 32
    warp_m: int = 2
    warp_n: int = 2
    stages: int = 3
    swizzle: int = 1
    splits: int = 1
    reduction: str = "kernel"

    @classmethod
    def archs_for(cls, target: str | None = None) -> tuple[str, ...]:
        """Only the SASS ``target`` runs: ``sm_90`` on Hopper, ``sm_80`` on Ampere and Ada
        (sm_80 SASS runs on sm_86/sm_89) — half the compile time of the portable build."""
        if target is None:
            return cls.ARCHS
        if target.startswith("sm_90"):
            return ("sm_90",)
        if target in ("sm_80", "sm_86", "sm_87", "sm_89"):
            return ("sm_80",)
        return cls.ARCHS

    @property
    def threads(self) -> int:
        return 32 * self.warp_m * self.warp_n

    @property
    def smem_bytes(self) -> int:
        pipeline = self.stages * (self.tile_m + self.tile_n) * self.tile_k * 2
        if self.reduction == "cluster":  # the fp32 tile is parked where the pipeline was
            return max(pipeline, self.tile_m * (self.tile_n + CLUSTER_TILE_PAD) * 4)
        return pipeline

    def tile_mn(self) -> tuple[int, int]:
        return self.tile_m, self.tile_n

    # -- legality --------------------------------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        if not (in_space := self.within_space()):
            return in_space
        if not (reduction := self.reduction_validity(arch)):
            return reduction
        arch = arch or self.ARCHS[0]
        if arch not in SMEM_LIMIT:
            return invalid(f"unknown arch {arch}: expected one of {sorted(SMEM_LIMIT)}")
        warps = self.warp_m * self.warp_n
        if warps > MAX_WARPS:
            return invalid(f"{warps} warps per CTA (> {MAX_WARPS})")
        if self.tile_m % (16 * self.warp_m) or self.tile_n % (16 * self.warp_n):
            return invalid(
                f"tile {self.tile_m}x{self.tile_n} does not split into {self.warp_m}x{self.warp_n} "
                "warp tiles of 16x16 multiples"
            )
        accumulators = self.tile_m * self.tile_n // self.threads
        if accumulators > MAX_ACCUMULATORS:
            return invalid(
                f"{accumulators} fp32 accumulators per thread (> {MAX_ACCUMULATORS}): would spill"
            )
        # 16-byte cp.async thread layouts must tile the CTA tile exactly.
        k_threads = self.tile_k // 8
        rows = self.threads // k_threads
        if self.tile_m % rows:
            return invalid(
                f"A copy covers {rows} rows per pass; tile M {self.tile_m} is not a multiple"
            )
        if self.layout is Layout.TN:
            if self.tile_n % rows:
                return invalid(
                    f"B copy covers {rows} rows per pass; tile N {self.tile_n} is not a multiple"
                )
        else:
            n_threads = self.tile_n // 8
            if self.threads % n_threads or self.tile_k % (self.threads // n_threads):
                return invalid(
                    f"B copy of {n_threads} threads along N does not tile {self.tile_k} K rows "
                    f"with {self.threads} threads"
                )
        limit = SMEM_LIMIT[arch]
        if self.smem_bytes > limit:
            return invalid(f"{self.smem_bytes} B of shared memory exceed {limit} B on {arch}")
        return self.fits(problem)

    def reduction_validity(self, arch: str | None) -> Validity:
        """The Hopper-only reductions are judged against ``arch`` when one is named; a portable
        build compiles them for every arch, and on older GPUs their launch fails cleanly."""
        if self.reduction == "kernel":
            return VALID
        if self.splits == 1:
            return invalid(f"reduction={self.reduction} is a split-K choice: needs splits ≥ 2")
        if arch is not None and arch not in HOPPER_ARCHS:
            return invalid(f"reduction={self.reduction} needs Hopper (sm_90), not {arch}")
        if self.reduction == "cluster" and self.splits > MAX_CLUSTER_SPLITS:
            return invalid(
                f"{self.splits} splits in one cluster (> {MAX_CLUSTER_SPLITS} CTAs on Hopper)"
            )
        return VALID

    # -- naming and rendering --------------------------------------------------------------
    @property
    def name(self) -> str:
        name = (
            f"hgemm_sm80_{self.tile_m}x{self.tile_n}x{self.tile_k}_w{self.warp_m}x{self.warp_n}"
            f"_s{self.stages}_{self.layout.value}_sw{self.swizzle}_splitk{self.splits}"
        )
        return name if self.reduction == "kernel" else f"{name}_{self.reduction}"

    def substitutions(self) -> dict[str, str]:
        nn = self.layout is Layout.NN
        return {
            "b_desc": "KxN row-major (N-major)" if nn else "NxK row-major (K-major)",
            "tile_m": str(self.tile_m),
            "tile_n": str(self.tile_n),
            "tile_k": str(self.tile_k),
            "warp_m": str(self.warp_m),
            "warp_n": str(self.warp_n),
            "stages": str(self.stages),
            "swizzle_log2": str(self.swizzle.bit_length() - 1),
            "splits": str(self.splits),
            "stride_b": "Stride<_1, int64_t, int64_t>" if nn else "Stride<int64_t, _1, int64_t>",
            "b_operand": B_NMAJOR if nn else B_KMAJOR,
            "b_k_offset": "int64_t(k0) * p.N" if nn else "k0",
            "b_stride_2d": "make_stride(_1{}, int64_t(p.N))"
            if nn
            else "make_stride(int64_t(p.K), _1{})",
            **REDUCTION_SUBSTITUTIONS[self.reduction],
        }

    def problem_fit(self, problem: Problem) -> dict[str, float]:
        fit = super().problem_fit(problem)
        k_tiles = math.ceil(problem.k / self.tile_k)
        fit["effective_splits"] = float(min(self.splits, k_tiles))
        return fit
