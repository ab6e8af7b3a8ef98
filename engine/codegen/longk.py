"""Family longk: Hopper split-K over a thread-block cluster, for long K and few output tiles.

Where M·N is small and K long (M·N ≤ 2^20, K ≥ 4·max(M, N)), a plain tiling leaves most of the
132 SMs idle, and a split-K that reduces in a second kernel (or after a workspace memset) pays a
launch that is a visible share of a 5–20 µs problem. Here the ``splits`` CTAs of one output tile
form a thread-block cluster: each computes one K slice (TMA loads completing on mbarriers, a
producer warp and one consumer warpgroup issuing ``wgmma`` with the accumulators in registers),
parks its fp32 partial tile in its own shared memory, and after a cluster barrier sums its share of
the tile over every CTA's copy through distributed shared memory and stores fp16. One launch, no
workspace, the same split order for every element (deterministic).

Knobs: the accumulator tile is 64 × ``tile_n`` (the wgmma M side is fixed at 64; N 16…256),
``stages`` of 64-wide K tiles, ``ctas_per_sm`` (1 or 2: the launch asks for enough shared
memory that no more CTAs share an SM, so that a cluster's CTAs spread over more SMs and more
bytes are in flight per SM; 0: as many as fit), ``splits`` (the cluster size, 1…16; above 8
is a non-portable cluster size the launcher opts in to), and ``swap``: compute Cᵀ = Bᵀ·Aᵀ so
that M, the small dimension of a skinny problem, lies on the wgmma N side (the tile is then
``tile_n`` × 64 of C).

``reduce`` says how the partial tiles meet. ``pull`` (the first design): after a cluster barrier
every CTA loads its share of every peer's partial tile through distributed shared memory
(remote loads, each a long-scoreboard wait for its warp), and a second cluster barrier keeps the
peers' memory alive until all have read. ``push``: every CTA sends each peer that peer's share of
its own partial with one bulk copy (``cp.async.bulk.shared::cluster.shared::cta``, the copy
engine's work, no thread waiting on it) into a receive slot in the peer's shared memory,
completing on the peer's mbarrier; each CTA waits on its own mbarrier and sums its slots from
local shared memory. ``send``: no cluster barrier after the main loop; each consumer thread
stores the accumulator pairs that other CTAs own (pair g of every thread belongs to CTA
g % splits: every CTA holds the same fragment layout) straight from its registers into the
owner's shared memory (``st.async``, completing on the owner's mbarrier), and each CTA waits on
its mbarrier and sums the pairs it owns. (A cluster barrier releases at cluster scope, which
compiles to a GPU-wide memory barrier, ``MEMBAR.ALL.GPU``; pull's reduction, two such barriers
and the reads between them, takes about 2 µs on an H100 whatever the cluster size.)
``reduce`` is a knob outside SPACE: the learned policy's logits are laid out
by SPACE and the shipped policy is recognised by that layout, so a value added there would orphan
it until it is retrained; the library offers push variants of the measured winners instead, and
sampling and enumeration keep to pull.

``prefetch`` (outside SPACE for the same reason): once the pipeline's first ``stages`` loads are
out, the producer asks for the rest of its K slice into L2 (``cp.async.bulk.prefetch.tensor``),
so that the slice's DRAM requests are all in flight from the start and a stage that comes free
refills from L2, not from DRAM a round trip later.

``groups`` (outside SPACE for the same reason; 1: the designs above) runs a tile's K over
``groups`` clusters of ``splits`` CTAs each, so that a tile gets more CTAs than one cluster may
hold (16) while every cluster stays small enough that all of them are resident at once. Each cluster
sums its partials through DSMEM as pull does; each CTA then writes its share of the cluster's sum
to the caller's workspace, and the last cluster of the tile to arrive (a 64-bit counter per
share, tagged with the launch's epoch, so the workspace needs no zeroing: the first arrival of a
launch takes over whatever the counter held) sums every group's share in group order and stores
fp16. Deterministic, one launch, no memset; the workspace is ``gemmforge_workspace_size``'s.
Measured on an H100, slower than one cluster of the same slices (the workspace round trip costs
1–2 µs of a 10 µs kernel), so it stays out of the searched library.

``multicast`` (outside SPACE for the same reason; 1: the designs above; 2) puts two output tiles
along Q in one cluster, each with its own ``splits`` (so at most 8): the two CTAs of a split
each load half of P's K tile into both CTAs' shared memory with one multicast TMA, and a stage
is refilled once both consumers have released it (each consumer warp arrives on both CTAs'
empty barriers), so that P crosses L2 once where single-tile kernels read it twice. The grid
rounds the Q tiles up to pairs (a tile outside C loads zeros and stores nothing). Each tile
sums its own splits in split order, so the result is its single-tile twin's, bit for bit.
Unmeasured so far, so it stays out of the searched library.

``evict_first_a`` (outside SPACE for the same reason) loads A's K tiles with an L2 evict-first
policy (``createpolicy.fractional.L2::evict_first`` and the TMA's ``.L2::cache_hint``): A is read
once, so its lines are the ones L2 should give up first when a later load needs a place, rather
than lines other work left there (B's, re-read by every tile along M, or the last kernel's dirty
output, which would have to be written back to DRAM first). Measured on an H100, its gain over
the same config was the device protocol's dirty flush (1.03–1.08× after it, 0.96–1.01× after a
flush that leaves L2 clean), so it stays out of the searched library.

``interleave`` (outside SPACE for the same reason) deals K tiles to a cluster's CTAs in turn
(CTA ``split`` takes tiles ``split``, ``split + splits``, …) instead of one contiguous slice each,
so that at any moment the cluster's loads lie side by side along each row of a K-major operand:
8 splits read 1 KiB of a row together where contiguous slices read 128 B in each of 8 places a
slice apart. For A-streaming shapes (M ≫ N), where every byte of A comes from DRAM once, this asks
DRAM for longer runs of one row. Each CTA sums other K tiles than its sliced twin's (the same
order every run: deterministic, not the twin's bits). Verified on an H100, its speed unmeasured.

Hand-written CUDA with inline PTX (mbarrier, cp.async.bulk.tensor, wgmma), not CUTLASS's
collective builder: the builder's kernels reduce split-K through a workspace (stream-K's
fixup) and cannot end a mainloop in a cluster-wide DSMEM reduction, and a raw kernel keeps the
launch path to one cudaLaunchKernelEx. CUTLASS is used for one host call:
``CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)`` (cutlass/cuda_host_adapter.hpp)
resolves the driver's tensor-map encoder, so the library needs no -lcuda.

Validity: Problem already requires N and K multiples of 8 (16-byte rows, as TMA needs); M, N and
K residues against the tile are handled by TMA's zero fill and predicated stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from engine.codegen.base import KernelConfig, Validity, invalid, load_template
from engine.problem import Layout, Problem

SMEM_LIMIT = 232448  # bytes of dynamic shared memory a block may opt in to on H100/H200
SMEM_PER_SM = 233472  # 228 KiB of shared memory per SM
TILE_M = 64  # the wgmma M side
CONSUMER_THREADS = 128  # one consumer warpgroup
TILE_K = 64  # one 128-byte swizzle row of fp16
ALIGN_SLACK = 1024  # the kernel aligns its shared memory to the 128-byte swizzle's 1024 bytes
MAX_CLUSTER = 16  # CTAs in a cluster on Hopper (above 8 non-portable)
HOPPER_ARCHS = ("sm_90a",)
# The class the family is for: the long-K class it is measured on (M·N ≤ 2^20, K ≥ 4·max(M, N)).
# One launch of one tile's splits per cluster has no persistent scheduler, so a shape of many
# output tiles belongs to the sm90 family. A band twice as wide each way (2^22, 2·) was searched
# until issue 41's first holdout, where longk lost on every shape of the band outside the class
# (2048×2048×16384: 16 of 32 candidates, best 0.41× cuBLASLt-autotune; 4096×64×8192: 15, 0.87×;
# 512×512×1024: 8, 0.79×) and won or tied on all six inside it (bench/NOTES.md §43).
MAX_MN_LOG2 = 20
MIN_K_OVER_MN = 4
REDUCTIONS = ("pull", "push", "send")  # the ``reduce`` knob's values; pull is the first design
MAX_GROUPS = 16  # clusters along K a tile (the epoch counter holds up to 255)


# The reduction's pieces of longk.cu.tmpl (KernelConfig.reduction_substitutions). Pull's end of
# the kernel, and push's device functions, live in template files of their own.
PULL_TEMPLATE = "longk_pull.cu.tmpl"
PUSH_TEMPLATE = "longk_push.cu.tmpl"
SEND_TEMPLATE = "longk_send.cu.tmpl"
# After the main loop: every CTA parks its fp32 partial tile in its pipeline's memory (pull, push
# and groups read it from there; send sends from its registers and parks nothing).
PARK_TEMPLATE = "longk_park.cu.tmpl"
PUSH_DESC = """\
// Reduction by push: after one cluster barrier each CTA sends every peer that peer's rows of its
// partial tile with one bulk copy (cp.async.bulk shared::cta -> shared::cluster) into a slot of
// the peer's shared memory, completing on the peer's mbarrier; each CTA waits on its own mbarrier
// and sums its rows from local shared memory, in split order ({splits} splits).
"""
PUSH_CONSTANTS = """\
// Push: a CTA's share of the tile is a range of whole padded rows (contiguous, so one bulk copy
// each); the receive slots, one per peer, follow the partial tile in the pipeline's memory.
constexpr int kRowBytes = kTileStride * 4;
constexpr int kSlotRows = (kTileRows + kSplits - 1) / kSplits;  // the largest share
constexpr int kSlotBytes = kSlotRows * kRowBytes;
constexpr int kReceiveBytes = (kSplits - 1) * kSlotBytes;
constexpr int kReduceBytes = kPartialBytes + kReceiveBytes;
static_assert(kRowBytes % 16 == 0 && kPartialBytes % 16 == 0,
              "bulk copies need 16-byte aligned addresses and sizes");
"""
PUSH_BARRIER = (
    "  const uint32_t received = empty + kStages * 8;  // push: every peer's share has landed\n"
)
PUSH_INIT = """\
    mbar_init(received, 1);
    // the bytes are expected before any peer can send (the sends follow a cluster barrier)
    mbar_expect_tx(received, uint32_t((kSplits - 1) * share_rows(split) * kRowBytes));
"""
PREFETCH_FUNCTIONS = """\
// prefetch=True: once the pipeline's first kStages loads are out, the producer asks for the rest
// of its K slice into L2 (cp.async.bulk.prefetch.tensor), so that every DRAM request of the slice
// is in flight from the start instead of a round trip later, as stages come free.
__device__ __forceinline__ void tma_prefetch_l2(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}
template <bool kKMajor, int kExtent, int kWidth>
__device__ __forceinline__ void prefetch_operand(const CUtensorMap* map, int row0, int kt) {
  if constexpr (kKMajor) {
    tma_prefetch_l2(map, kt * kTileK, row0);
  } else {
#pragma unroll
    for (int c = 0; c < kExtent / kWidth; ++c) tma_prefetch_l2(map, row0 + c * kWidth, kt * kTileK);
  }
}

"""
PREFETCH_L2 = """\
        if (i == kStages - 1) {  // the pipeline is full: the rest of the slice into L2
          for (int j = kStages; j < k_tiles; ++j) {
            prefetch_operand<kPKMajor, kTileP, kPWidth>(&map_p, p0, kt_begin + j);
            prefetch_operand<kQKMajor, kTileQ, kQWidth>(&map_q, q0, kt_begin + j);
          }
        }
"""
PUSH_REDUCTION = """\
  push_reduce(tile, received, split, kSwap ? q0 : p0, kSwap ? p0 : q0, p);
"""
SEND_DESC = """\
// Reduction by send (not as said above): no cluster barrier after the main loop. Each consumer
// thread stores the accumulator pairs that other CTAs own straight from its registers into their
// shared memory (st.async, completing on the owner's mbarrier), and each CTA waits on its own
// mbarrier and sums the pairs it owns in split order ({splits} splits). The only cluster barrier
// is a relaxed one after the mbarrier init, waited for after the main loop.
"""
SEND_CONSTANTS = """\
// Send: register pair g of a consumer thread is owned by CTA g % kSplits; a receiver's slots, one
// per peer, follow the pipeline (a peer may send while this CTA still computes).
constexpr int kPairs = kTileQ / 4;
constexpr int kOwnPairs = (kPairs + kSplits - 1) / kSplits;
constexpr int kSlotBytes = kOwnPairs * kConsumerThreads * 8;
constexpr int kReceiveBytes = (kSplits - 1) * kSlotBytes;
"""
SEND_BARRIER = (
    "  const uint32_t received = empty + kStages * 8;  // send: every peer's pairs have landed\n"
)
SEND_INIT = """\
    mbar_init(received, 1);
    mbar_expect_tx(received, uint32_t((kSplits - 1) * own_pairs(split) * kConsumerThreads * 8));
"""
# after the mbarrier init: the init fence releases the barriers, the arrival is relaxed (a release
# would put a GPU-wide memory barrier in front of it); send_reduce waits for it
SEND_READY = """\
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
"""
SEND_REDUCTION = """\
  send_reduce(acc, data + kPipelineBytes, received, split, kSwap ? q0 : p0, kSwap ? p0 : q0, p);
"""


class SenderSlots(NamedTuple):
    """What push and send put in the template's reduction slots (each sends to its peers)."""

    desc: str
    constants: str
    data_bytes: str
    barrier: str
    init: str
    template: str
    reduction: str


SENDERS = {
    "push": SenderSlots(
        PUSH_DESC, PUSH_CONSTANTS, "kReduceBytes", PUSH_BARRIER, PUSH_INIT, PUSH_TEMPLATE,
        PUSH_REDUCTION,
    ),
    "send": SenderSlots(
        SEND_DESC, SEND_CONSTANTS, "kPipelineBytes + kReceiveBytes", SEND_BARRIER, SEND_INIT,
        SEND_TEMPLATE, SEND_REDUCTION,
    ),
}  # fmt: skip


GROUPS_TEMPLATE = "longk_groups.cu.tmpl"
GROUPS_DESC = """\
// Groups (not as said above): a tile's K runs over {groups} such clusters, and the cluster's sum
// is not stored but written to the caller's workspace; the last cluster to arrive at a share sums
// every group's, in group order, and stores fp16. One launch, no memset.
"""
GROUPS_INCLUDES = "#include <atomic>\n#include <chrono>\n\n"
GROUPS_CONSTANTS = """\
// groups: a tile's K runs over kGroups clusters; the workspace holds a counter per share (a
// cluster rank's rows of the tile) and each group's fp32 sum of that share.
constexpr int kGroups = {groups};
constexpr int kSlices = kSplits * kGroups;  // K slices a tile
constexpr int kShareQuads = (kTileRows * (kTileCols / 4) + kSplits - 1) / kSplits;
__host__ __device__ constexpr int64_t counter_quads(int64_t tiles) {{
  return (tiles * kSplits * 8 + 15) / 16;  // the counters, in 16-byte units
}}
__host__ __device__ constexpr int64_t workspace_bytes(int64_t tiles) {{
  return 16 * (counter_quads(tiles) + tiles * kSplits * kGroups * kShareQuads);
}}
// The counter is the launch's epoch (56 bits) over an arrival count (8 bits): the first arrival
// of a launch finds another epoch (a fresh workspace's bytes, an earlier launch's) and counts
// from zero, so nothing has to be zeroed; the last arrival sets the count back to zero, so that
// a CUDA graph replaying one launch (one epoch) starts each replay from zero too.
__device__ __forceinline__ bool arrive_last(unsigned long long* counter,
                                            unsigned long long epoch) {{
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter);
  for (;;) {{
    const unsigned long long count = (seen >> 8) == epoch ? (seen & 0xff) : 0;
    const bool last = count + 1 == kGroups;
    const unsigned long long next = (epoch << 8) | (last ? 0 : count + 1);
    const unsigned long long found = atomicCAS(counter, seen, next);
    if (found == seen) {{
      __threadfence();
      return last;
    }}
    seen = found;
  }}
}}
// A launch's epoch: distinct per launch of a process, and across processes by a clock-seeded start.
inline unsigned long long next_epoch() {{
  static std::atomic<unsigned long long> launches{{
      (unsigned long long)(std::chrono::steady_clock::now().time_since_epoch().count()) *
      0x9E3779B97F4A7C15ull}};
  return (launches.fetch_add(1, std::memory_order_relaxed) + 1) & ((1ull << 56) - 1);
}}
"""
GROUPS_PARAMS = "  void* workspace;\n  unsigned long long epoch;\n"
PULL_K_SLICE = """\
  const int kt_begin = int(int64_t(split) * p.k_tiles / kSplits);
  const int kt_end = int(int64_t(split + 1) * p.k_tiles / kSplits);
"""
EVICT_FIRST_FUNCTIONS = """\
// evict_first_a: A's K tiles are read once; L2 gives their lines up first.
__device__ __forceinline__ void tma_load_evict_first(const CUtensorMap* map, uint32_t dst,
                                                     uint32_t bar, int c0, int c1) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
template <bool kKMajor, int kExtent, int kWidth>
__device__ __forceinline__ void load_evict_first(const CUtensorMap* map, uint32_t dst,
                                                 uint32_t bar, int row0, int kt) {
  static_assert(kKMajor, "A is K-major in every layout");
  tma_load_evict_first(map, dst, bar, kt * kTileK, row0);
}

"""
INTERLEAVED_K_SLICE = """\
  // interleaved: this CTA's K tiles are split, split + kSplits, ... (i counts them from 0)
  const int kt_begin = 0;
  const int kt_end = (p.k_tiles - split + kSplits - 1) / kSplits;
"""
GROUPS_K_SLICE = """\
  const int group = int(blockIdx.z) / kSplits;  // the cluster's place along K among the tile's
  const int slice = group * kSplits + split;
  const int kt_begin = int(int64_t(slice) * p.k_tiles / kSlices);
  const int kt_end = int(int64_t(slice + 1) * p.k_tiles / kSlices);
"""
NO_WORKSPACE = 'extern "C" size_t gemmforge_workspace_size(int, int, int) { return 0; }'
GROUPS_WORKSPACE = """\
extern "C" size_t gemmforge_workspace_size(int M, int N, int) {
  const int p_rows = kSwap ? N : M, q_rows = kSwap ? M : N;
  const int64_t tiles =
      int64_t((p_rows + kTileP - 1) / kTileP) * int64_t((q_rows + kTileQ - 1) / kTileQ);
  return size_t(workspace_bytes(tiles));
}"""
GROUPS_PARAMS_INIT = ", workspace, next_epoch()"
GROUPS_WORKSPACE_CHECK = (
    "  if (workspace == nullptr) return int(cudaErrorInvalidValue);  // the counters live there\n"
)
MULTICASTS = (1, 2)  # the ``multicast`` knob's values: CTAs along N (swapped: M) sharing P's loads
MULTICAST_DESC = """\
// Multicast: a cluster holds {multicast} output tiles along Q, each with its {splits} splits. The
// {multicast} CTAs of a split share P's K tile: each loads 1/{multicast} of it into all of their
// shared memories with one multicast TMA (each CTA's full barrier counts the stage's bytes from
// all of them), and a stage is refilled once every CTA of the group has released it (their
// consumers arrive on each other's empty barriers). Each tile sums over its own splits.
"""
MULTICAST_CONSTANTS = """\
constexpr int kMulticast = {multicast};  // CTAs along Q sharing P's loads
constexpr int kPShareBytes = kPBytes / kMulticast;  // the part of P's K tile each of them loads
static_assert(kPShareBytes % 1024 == 0, "a share must keep the 1024-byte swizzle alignment");
"""
MULTICAST_FUNCTIONS = """\
// multicast: a TMA load into the same offset of every CTA of `mask` (cluster ranks), completing
// on each one's mbarrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(const CUtensorMap* map, uint32_t dst,
                                                   uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
// Member `member` of a multicast group loads its share of P's K tile `kt`: rows (K-major) or K
// rows (MN-major) [member * extent / kMulticast, ...) of the tile, for every CTA of the group.
__device__ __forceinline__ void load_p_share(const CUtensorMap* map, uint32_t stage, uint32_t bar,
                                             int row0, int kt, int member, uint16_t mask) {
  if constexpr (kPKMajor) {
    tma_load_multicast(map, stage + member * kPShareBytes, bar, kt * kTileK,
                       row0 + member * (kTileP / kMulticast), mask);
  } else {
    tma_load_multicast(map, stage + member * kPShareBytes, bar, row0,
                       kt * kTileK + member * (kTileK / kMulticast), mask);
  }
}
// An arrival on the mbarrier at `bar`'s offset in CTA `rank` of the cluster. CTA-scope release,
// as CUTLASS's ClusterBarrier arrives: the stage was read by wgmma, whose completion the caller
// has waited for, and is rewritten by TMA; a cluster-scope release would put a GPU-wide memory
// barrier (MEMBAR.ALL.GPU) in front of every arrival, one per K tile (measured: the main loop
// four times slower).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
"""
MULTICAST_POSITION = """\
  // the cluster is kMulticast tiles along Q (y) by kSplits splits (z); ranks run y fastest
  const int member = int(cluster.block_index().y), split = int(cluster.block_index().z);
  const uint16_t group_mask = uint16_t(((1u << kMulticast) - 1) << (split * kMulticast));
"""
# every CTA's barriers are set up before a peer's multicast reaches them: the init fence above
# already releases them, so the arrival is relaxed (a release would add a GPU-wide barrier)
MULTICAST_READY = """\
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
"""
MULTICAST_LOAD_P = (
    "        load_p_share(&map_p, stage, bar, p0, kt_begin + i, member, group_mask);\n"
)
MULTICAST_RELEASE = """\
      if (i > 0 && lane == 0) {  // the group's producers all write into this stage
        const uint32_t freed = empty + 8 * ((i - 1) % kStages);
#pragma unroll
        for (int g = 0; g < kMulticast; ++g) mbar_arrive_remote(freed, split * kMulticast + g);
      }
"""
MULTICAST_MAP = """\
// The tensor map of P for shared loads: boxes of 1/kMulticast of the tile (rows, or K rows).
cudaError_t shared_p_map(CUtensorMap* map, const void* base, int rows, int K) {
  if (kPKMajor) return encode(map, base, rows, K, kTileK, kTileP / kMulticast);
  return encode(map, base, K, rows, mn_width(kTileP), kTileK / kMulticast);
}

"""


def serves(
    problem: Problem, max_mn_log2: int = MAX_MN_LOG2, min_k_over_mn: int = MIN_K_OVER_MN
) -> bool:
    """Whether ``problem`` is long-K with few output tiles, where the family is searched (other
    bounds: a class as it was drawn before, bench/replay_fresh.py)."""
    return problem.m * problem.n <= 2**max_mn_log2 and problem.k >= min_k_over_mn * max(
        problem.m, problem.n
    )


def wgmma_code(tile_n: int, p_k_major: bool, q_k_major: bool) -> str:
    """The device function issuing one m64n{tile_n}k16 wgmma (fp32 += fp16·fp16) from two
    shared-memory descriptors into the ``tile_n / 2`` accumulator registers of each thread."""
    count = tile_n // 2
    registers = ", ".join(f"%{i}" for i in range(count))
    outputs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    transpose_p, transpose_q = int(not p_k_major), int(not q_k_major)
    return (
        "// d += P . Q over 16 K elements: P (64 x 16) and Q (16 x kTileQ) from shared memory.\n"
        "__device__ __forceinline__ void wgmma(float (&d)[kTileQ / 2], uint64_t desc_p, "
        "uint64_t desc_q) {\n"
        "  asm volatile(\n"
        '      "{\\n.reg .pred p;\\n"\n'
        f'      "setp.ne.b32 p, %{count + 2}, 0;\\n"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{tile_n}k16.f32.f16.f16 "\n'
        f'      "{{{registers}}}, "\n'
        f'      "%{count}, %{count + 1}, p, 1, 1, {transpose_p}, {transpose_q};\\n}}\\n"\n'
        f"      : {outputs}\n"
        '      : "l"(desc_p), "l"(desc_q), "r"(1));\n'
        "}"
    )


@dataclass(frozen=True)
class LongKConfig(KernelConfig):
    FAMILY: ClassVar[str] = "longk"
    ARCHS: ClassVar[tuple[str, ...]] = HOPPER_ARCHS
    TEMPLATE: ClassVar[str] = "longk.cu.tmpl"
    SPACE: ClassVar[dict[str, tuple[object, ...]]] = {
        "tile_n": (16, 32, 64, 128, 192, 256),
        "stages": (2, 3, 4, 5, 6, 8, 10, 12),
        "splits": (1, 2, 3, 4, 6, 8, 12, 16),
        "swap": (False, True),
        "ctas_per_sm": (0, 1, 2),
    }

    tile_n: int = 64
    stages: int = 4
    splits: int = 8
    swap: bool = False
    ctas_per_sm: int = 0
    reduce: str = "pull"
    prefetch: bool = False
    groups: int = 1
    multicast: int = 1
    interleave: bool = False
    evict_first_a: bool = False

    @classmethod
    def archs_for(cls, target: str | None = None) -> tuple[str, ...]:
        return cls.ARCHS

    @property
    def tile_k(self) -> int:
        return TILE_K

    @property
    def pipeline_bytes(self) -> int:
        return self.stages * (TILE_M + self.tile_n) * TILE_K * 2

    @property
    def partial_tile_bytes(self) -> int:
        """The fp32 partial tile (padded rows), parked where the pipeline was."""
        rows, row_bytes = self.partial_rows_and_row_bytes()
        return rows * row_bytes

    @property
    def push(self) -> bool:
        return self.reduce == "push"

    @property
    def send(self) -> bool:
        return self.reduce == "send"

    def partial_rows_and_row_bytes(self) -> tuple[int, int]:
        """The partial tile's rows (along M of C) and the bytes of one padded row."""
        rows, cols, pad = (self.tile_n, TILE_M, 4) if self.swap else (TILE_M, self.tile_n, 8)
        return rows, (cols + pad) * 4

    @property
    def receive_slot_bytes(self) -> int:
        """Push: one sender's slot in a receiver, the largest share (rows split as evenly as
        they go, ``ceil(rows / splits)``) of padded rows; 0 for pull."""
        if not self.push:
            return 0
        rows, row_bytes = self.partial_rows_and_row_bytes()
        return -(-rows // self.splits) * row_bytes

    @property
    def receive_bytes(self) -> int:
        """Push: a slot for every peer (a CTA reads its own share from its own partial tile);
        they follow the partial tile, in the pipeline's memory. 0 for pull."""
        return (self.splits - 1) * self.receive_slot_bytes

    @property
    def send_receive_bytes(self) -> int:
        """Send: a slot for every peer, each the most register pairs a CTA owns (``tile_n / 4``
        pairs a thread dealt round the cluster) for every consumer thread; past the pipeline.
        0 otherwise."""
        if not self.send:
            return 0
        own_pairs = -(-(self.tile_n // 4) // self.splits)
        return (self.splits - 1) * own_pairs * CONSUMER_THREADS * 8

    @property
    def barrier_bytes(self) -> int:
        """The pipeline's full and empty mbarriers, and push's or send's receive mbarrier."""
        return (2 * self.stages + int(self.push or self.send)) * 8

    @property
    def smem_bytes(self) -> int:
        data = max(
            self.pipeline_bytes + self.send_receive_bytes,
            self.partial_tile_bytes + self.receive_bytes,
        )
        return ALIGN_SLACK + data + self.barrier_bytes

    @property
    def smem_request(self) -> int:
        """What the launch asks for: padded so that at most ``ctas_per_sm`` CTAs share an SM."""
        if self.ctas_per_sm == 0:
            return self.smem_bytes
        return max(self.smem_bytes, SMEM_PER_SM // (self.ctas_per_sm + 1) - 1024 + 16)

    def natural_ctas_per_sm(self) -> int:
        """How many CTAs share an SM without padding (the runtime reserves 1 KiB a CTA)."""
        return SMEM_PER_SM // (self.smem_bytes + 1024)

    def tile_mn(self) -> tuple[int, int]:
        """The output tile in C's orientation (M, N)."""
        return (self.tile_n, TILE_M) if self.swap else (TILE_M, self.tile_n)

    # -- legality --------------------------------------------------------------------------
    def is_valid(self, problem: Problem | None = None, arch: str | None = None) -> Validity:
        if not (in_space := self.within_space()):
            return in_space
        arch = arch or self.ARCHS[0]
        if arch not in HOPPER_ARCHS:
            return invalid(f"wgmma and clusters need sm_90a, not {arch}")
        if self.splits > MAX_CLUSTER:
            return invalid(f"{self.splits} CTAs in a cluster (> {MAX_CLUSTER})")
        if self.reduce not in REDUCTIONS:
            return invalid(f"reduce={self.reduce!r} is not one of {list(REDUCTIONS)}")
        if self.reduce != "pull" and self.splits == 1:
            return invalid(f"reduce={self.reduce!r} with 1 split has no peer to send to")
        if not 1 <= self.groups <= MAX_GROUPS:
            return invalid(f"groups={self.groups}: 1 to {MAX_GROUPS} clusters along K a tile")
        if self.groups > 1 and self.reduce != "pull":
            return invalid(
                f"groups > 1 sums each cluster by pull; {self.reduce} is not built for it"
            )
        if self.multicast not in MULTICASTS:
            return invalid(f"multicast={self.multicast} is not one of {list(MULTICASTS)}")
        if self.multicast > 1 and (self.reduce != "pull" or self.groups > 1 or self.prefetch):
            return invalid("multicast is built for one cluster reduced by pull, without prefetch")
        if self.interleave and (self.groups > 1 or self.multicast > 1 or self.prefetch):
            return invalid("interleave is built for one cluster's slices, without prefetch")
        if self.evict_first_a and self.multicast > 1:
            return invalid("evict_first_a is built for single-tile loads, not multicast")
        if self.splits * self.multicast > MAX_CLUSTER:
            return invalid(
                f"{self.splits} splits x {self.multicast} multicast CTAs in a cluster "
                f"(> {MAX_CLUSTER})"
            )
        if self.smem_bytes > SMEM_LIMIT:
            return invalid(f"{self.smem_bytes} B of shared memory exceed {SMEM_LIMIT} B")
        if self.ctas_per_sm and self.natural_ctas_per_sm() <= self.ctas_per_sm:
            return invalid(
                f"ctas_per_sm={self.ctas_per_sm} changes nothing: {self.smem_bytes} B already "
                f"leave room for only {self.natural_ctas_per_sm()} CTA(s) an SM"
            )
        if problem is not None and not serves(problem):
            return invalid(
                f"{problem.key} is not long-K with few output tiles (M·N ≤ 2^{MAX_MN_LOG2}, "
                f"K ≥ {MIN_K_OVER_MN}·max(M, N)): the family is searched only there"
            )
        if problem is not None and self.multicast > self.q_tiles(problem):
            return invalid(
                f"multicast={self.multicast} but the problem has {self.q_tiles(problem)} "
                f"tile(s) along the wgmma N side to share P with"
            )
        if problem is not None and self.splits * self.groups > math.ceil(problem.k / TILE_K):
            return invalid(
                f"{self.splits} splits x {self.groups} groups but K={problem.k} has only "
                f"{math.ceil(problem.k / TILE_K)} tiles"
            )
        return self.fits(problem)

    # -- naming and rendering --------------------------------------------------------------
    @property
    def name(self) -> str:
        tm, tn = self.tile_mn()
        swap = "_swap" if self.swap else ""
        occupancy = f"_occ{self.ctas_per_sm}" if self.ctas_per_sm else ""
        push = f"_{self.reduce}" if self.reduce != "pull" else ""  # pull keeps its names
        prefetch = "_pf" if self.prefetch else ""
        groups = f"_g{self.groups}" if self.groups > 1 else ""
        multicast = f"_mc{self.multicast}" if self.multicast > 1 else ""
        interleave = "_il" if self.interleave else ""
        evict = "_efa" if self.evict_first_a else ""
        return (
            f"hgemm_longk_{tm}x{tn}x{TILE_K}_s{self.stages}_{self.layout.value}"
            f"_cluster{self.splits}{groups}{swap}{occupancy}{push}{prefetch}{multicast}"
            f"{interleave}{evict}"
        )

    def substitutions(self) -> dict[str, str]:
        tn = self.layout is Layout.TN
        p_k_major = tn if self.swap else True
        q_k_major = True if self.swap else tn
        swap_desc = (
            "swapped: C^T = B^T . A^T, so the tile is\n// "
            f"{self.tile_n} (M) x 64 (N) of C and M lies on the wgmma N side."
            if self.swap
            else f"the tile is 64 (M) x {self.tile_n} (N) of C."
        )
        return {
            "b_desc": "NxK row-major (K-major)" if tn else "KxN row-major (N-major)",
            "tile_n": str(self.tile_n),
            "stages": str(self.stages),
            "splits": str(self.splits),
            "swap": "true" if self.swap else "false",
            "ctas_per_sm": str(self.ctas_per_sm),
            "b_kmajor": "true" if tn else "false",
            "swap_desc": swap_desc,
            "wgmma_code": wgmma_code(self.tile_n, p_k_major, q_k_major),
            "park": "" if self.send else load_template(PARK_TEMPLATE).template,
            **self.reduction_substitutions(),
            # empty without prefetch: the sources, hence the build cache keys, stay as they were
            "prefetch_functions": PREFETCH_FUNCTIONS if self.prefetch else "",
            "prefetch_l2": PREFETCH_L2 if self.prefetch else "",
            **self.groups_substitutions(),
            **self.multicast_substitutions(),
            "k_tile": self.k_tile_expression,
            "q_loader": self.loader(streamed=self.swap),
            "evict_functions": EVICT_FIRST_FUNCTIONS if self.evict_first_a else "",
        }

    def k_slice_code(self, grouped: bool) -> str:
        """Where this CTA's K tiles begin and end (C++, in the kernel's names)."""
        if grouped:
            return GROUPS_K_SLICE
        return INTERLEAVED_K_SLICE if self.interleave else PULL_K_SLICE

    def loader(self, streamed: bool) -> str:
        """The device function that loads an operand's K tile: A's (``streamed``) with the
        evict-first policy when ``evict_first_a``."""
        return "load_evict_first" if streamed and self.evict_first_a else "load_operand"

    @property
    def k_tile_expression(self) -> str:
        """The K tile the producer's i-th load reads (C++, in the kernel's names)."""
        return "split + i * kSplits" if self.interleave else "kt_begin + i"

    def multicast_substitutions(self) -> dict[str, str]:
        """The template's slots for ``multicast``: with 1 they hold the text the template had
        before the knob (the build cache keys stay as they were)."""
        if self.multicast == 1:
            return {
                "multicast_desc": "",
                "multicast_constants": "",
                "multicast_functions": "",
                "cluster_position": "  const int split = int(cluster.block_rank());\n",
                "empty_arrivals": "kConsumerThreads / 32",
                "cluster_ready": SEND_READY if self.send else "",
                "load_p": (
                    f"        {self.loader(streamed=not self.swap)}<kPKMajor, kTileP, kPWidth>"
                    f"(&map_p, stage, bar, p0, {self.k_tile_expression});\n"
                ),
                "release_stage": (
                    "      if (i > 0 && lane == 0) mbar_arrive(empty + 8 * ((i - 1) % kStages));\n"
                ),
                "p_map_call": "operand_map(&maps.p, p_base, kPKMajor, p_rows, K, kTileP)",
                "cluster_ctas": "kSplits",
                "cluster_y": "1",
                "grid_y": "unsigned((q_rows + kTileQ - 1) / kTileQ)",
                "multicast_map": "",
            }
        return {
            "multicast_desc": MULTICAST_DESC.format(multicast=self.multicast, splits=self.splits),
            "multicast_constants": MULTICAST_CONSTANTS.format(multicast=self.multicast),
            "multicast_functions": MULTICAST_FUNCTIONS,
            "cluster_position": MULTICAST_POSITION,
            "empty_arrivals": "kMulticast * kConsumerThreads / 32",
            "cluster_ready": MULTICAST_READY,
            "load_p": MULTICAST_LOAD_P,
            "release_stage": MULTICAST_RELEASE,
            "p_map_call": "shared_p_map(&maps.p, p_base, p_rows, K)",
            "cluster_ctas": "kSplits * kMulticast",
            "cluster_y": "unsigned(kMulticast)",
            "multicast_map": MULTICAST_MAP,
            "grid_y": (
                "unsigned(((q_rows + kTileQ - 1) / kTileQ + kMulticast - 1) / kMulticast * "
                "kMulticast)"
            ),
        }

    def groups_substitutions(self) -> dict[str, str]:
        """The template's slots for ``groups``: with one group they hold the text the template
        had before the knob (the build cache keys stay as they were)."""
        grouped = self.groups > 1
        return {
            "groups_includes": GROUPS_INCLUDES if grouped else "",
            "groups_constants": GROUPS_CONSTANTS.format(groups=self.groups) if grouped else "",
            "params_extra": GROUPS_PARAMS if grouped else "",
            "k_slice": self.k_slice_code(grouped),
            "workspace_size": GROUPS_WORKSPACE if grouped else NO_WORKSPACE,
            "workspace_param": " workspace" if grouped else "",
            "params_init": GROUPS_PARAMS_INIT if grouped else "",
            "workspace_check": GROUPS_WORKSPACE_CHECK if grouped else "",
            "grid_z": "kSplits * kGroups" if grouped else "kSplits",
        }

    def reduction_substitutions(self) -> dict[str, str]:
        """The template's reduction slots. Pull's text is the first design's, byte for byte (a
        source's bytes are its build's cache key), so the pull slots that hold no code are empty
        and the others hold exactly what the template said before push existed."""
        if self.push or self.send:
            slots = SENDERS[self.reduce]
            functions = load_template(slots.template).substitute(smem_bytes=self.smem_bytes)
            return {
                "push_desc": slots.desc.format(splits=self.splits),
                "push_constants": slots.constants,
                "reduce_data_bytes": slots.data_bytes,
                "barrier_bytes": "(2 * kStages + 1) * 8",
                "push_barrier": slots.barrier,
                "push_init": slots.init,
                "push_functions": functions + "\n",
                "reduction": slots.reduction,
            }
        if self.groups > 1:  # sums each cluster as pull does, then across clusters
            reduction = load_template(GROUPS_TEMPLATE).template
        else:  # the peers of a split: its column of the cluster (with multicast, Q runs first)
            peer = "s" if self.multicast == 1 else "kMulticast * s + member"
            reduction = load_template(PULL_TEMPLATE).substitute(peer_rank=peer)
        return {
            "push_desc": GROUPS_DESC.format(groups=self.groups) if self.groups > 1 else "",
            "push_constants": "",
            "reduce_data_bytes": "kPartialBytes",
            "barrier_bytes": "2 * kStages * 8",
            "push_barrier": "",
            "push_init": "",
            "push_functions": "",
            "reduction": reduction,
        }

    def q_tiles(self, problem: Problem) -> int:
        """The output tiles along the wgmma N side (Q: N of C, M when swapped)."""
        return math.ceil((problem.m if self.swap else problem.n) / self.tile_n)

    def ctas(self, problem: Problem) -> int:
        """The launch's CTAs: output tiles (along Q in whole multicast groups) times the K
        slices of a tile."""
        q_tiles = -(-self.q_tiles(problem) // self.multicast) * self.multicast
        p_tiles = math.ceil((problem.n if self.swap else problem.m) / TILE_M)
        return p_tiles * q_tiles * self.splits * self.groups

    def problem_fit(self, problem: Problem) -> dict[str, float]:
        fit = super().problem_fit(problem)
        fit["waves"] = self.ctas(problem) / 132
        fit["effective_splits"] = float(
            min(self.splits * self.groups, math.ceil(problem.k / TILE_K))
        )
        return fit
