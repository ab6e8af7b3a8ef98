# The Triton HGEMM of the "triton" kernel family (engine/families/triton.py).
#
# C (M x N) = A (M x K) . B, fp16 in and out, fp32 accumulation, row-major; B is K x N (NN) or
# N x K (TN, B_KMAJOR). Every knob is a constexpr; M, N and K are run-time values (N and K are
# multiples of 8: engine/problem.py), so one binary serves every shape of its layout.
#
# Work is split into units: one output tile (TILES in group-M order) times one slice of K
# (SPLITS). The grid is one program a unit, or (PERSISTENT) one a streaming multiprocessor that
# strides over the units. With SPLITS > 1 each unit stores its fp32 partial tile in the workspace
# and counts itself in the tile's counter (zeroed by the launcher on the caller's stream); the
# last to arrive sums the partials in split order and stores C, so no second kernel reduces them
# and the result does not depend on which split came last.
#
# Loads come from pointers (masked only along K, and only without EVEN_K: rows past M and
# columns past N wrap around, and their results are never stored) or (TMA) from tensor
# descriptors built on the device, whose out-of-bounds reads are zero. The store is a masked
# pointer store or (STORE_TMA) a descriptor store, which clips at the edges.
import triton
import triton.language as tl


@triton.jit
def _tile_of(unit, tiles_m, tiles_n, SPLITS: tl.constexpr, GROUP_M: tl.constexpr):
    """The unit's tile (group-M order: GROUP_M rows of tiles walked column by column, so that
    neighbouring programs share A's and B's tiles in L2) and its slice of K."""
    tile = unit // SPLITS
    split = unit % SPLITS
    width = GROUP_M * tiles_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % rows
    pid_n = (tile % width) // rows
    return tile, split, pid_m, pid_n


@triton.jit
def _mainloop_pointers(
    A,
    B,
    M,
    N,
    K,
    pid_m,
    pid_n,
    kt_begin,
    kt_end,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    EVEN_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    # (K // 8) * 8 is K, written so that the compiler knows each row starts on 16 bytes
    stride_a = (K // 8) * 8
    stride_b = stride_a if B_KMAJOR else (N // 8) * 8
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rn = tl.max_contiguous(tl.multiple_of(rn, 8), 8)  # N % 8 == 0: a wrap never splits 8
    rk = tl.arange(0, BLOCK_K)
    k0 = kt_begin * BLOCK_K
    a_ptrs = A + rm[:, None].to(tl.int64) * stride_a + (k0 + rk)[None, :]
    if B_KMAJOR:
        b_ptrs = B + rn[None, :].to(tl.int64) * stride_b + (k0 + rk)[:, None]
        b_step = BLOCK_K
    else:
        b_ptrs = B + (k0 + rk)[:, None].to(tl.int64) * stride_b + rn[None, :]
        b_step = BLOCK_K * stride_b
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(kt_begin, kt_end, num_stages=STAGES):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            left = stride_a - kt * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += b_step
    return acc


@triton.jit
def _mainloop_tma(
    a_desc,
    b_desc,
    pid_m,
    pid_n,
    kt_begin,
    kt_end,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    STAGES: tl.constexpr,
):
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(kt_begin, kt_end, num_stages=STAGES):
        k0 = kt * BLOCK_K
        a = a_desc.load([m0, k0])
        if B_KMAJOR:  # noqa: SIM108 (a constexpr branch: only one side is compiled)
            b = b_desc.load([n0, k0]).T
        else:
            b = b_desc.load([k0, n0])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _store(
    C,
    c_desc,
    M,
    N,
    pid_m,
    pid_n,
    acc,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STORE_TMA: tl.constexpr,
):
    out = acc.to(tl.float16)
    if STORE_TMA:
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)
    else:
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rn = tl.max_contiguous(tl.multiple_of(rn, 8), 8)
        stride_c = (N // 8) * 8
        ptrs = C + rm[:, None].to(tl.int64) * stride_c + rn[None, :]
        tl.store(ptrs, out, mask=(rm[:, None] < M) & (rn[None, :] < stride_c))


@triton.jit
def hgemm(
    A,
    B,
    C,
    M,
    N,
    K,
    workspace,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLITS: tl.constexpr,
    STAGES: tl.constexpr,
    PERSISTENT: tl.constexpr,
    TMA: tl.constexpr,
    STORE_TMA: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    units = tiles_m * tiles_n * SPLITS
    k_tiles = tl.cdiv(K, BLOCK_K)
    if TMA:
        a_desc = tl.make_tensor_descriptor(
            A, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K]
        )
        if B_KMAJOR:
            b_desc = tl.make_tensor_descriptor(
                B, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K]
            )
        else:
            b_desc = tl.make_tensor_descriptor(
                B, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N]
            )
    else:
        a_desc = None
        b_desc = None
    if STORE_TMA:
        c_desc = tl.make_tensor_descriptor(
            C, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N]
        )
    else:
        c_desc = None
    if PERSISTENT:  # noqa: SIM108 (a constexpr branch: only one side is compiled)
        step = tl.num_programs(0)
    else:
        step = units  # one unit a program
    for unit in range(tl.program_id(0), units, step):
        tile, split, pid_m, pid_n = _tile_of(unit, tiles_m, tiles_n, SPLITS, GROUP_M)
        kt_begin = split * k_tiles // SPLITS
        kt_end = (split + 1) * k_tiles // SPLITS
        if TMA:
            acc = _mainloop_tma(
                a_desc,
                b_desc,
                pid_m,
                pid_n,
                kt_begin,
                kt_end,
                BLOCK_M,
                BLOCK_N,
                BLOCK_K,
                B_KMAJOR,
                STAGES,
            )
        else:
            acc = _mainloop_pointers(
                A,
                B,
                M,
                N,
                K,
                pid_m,
                pid_n,
                kt_begin,
                kt_end,
                BLOCK_M,
                BLOCK_N,
                BLOCK_K,
                B_KMAJOR,
                EVEN_K,
                STAGES,
            )
        if SPLITS == 1:
            _store(C, c_desc, M, N, pid_m, pid_n, acc, BLOCK_M, BLOCK_N, STORE_TMA)
        else:
            # workspace: one int32 counter a tile (256-byte aligned block), then the partials
            counters = workspace.to(tl.pointer_type(tl.int32))
            counter_bytes = ((tiles_m * tiles_n * 4 + 255) // 256) * 256
            partials = (workspace + counter_bytes).to(tl.pointer_type(tl.float32))
            tile_elems = BLOCK_M * BLOCK_N
            offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            base = partials + tile.to(tl.int64) * (SPLITS * tile_elems)
            tl.store(base + split * tile_elems + offs, acc)
            tl.debug_barrier()  # every thread's partial is written before the count
            arrived = tl.atomic_add(counters + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLITS - 1:  # the last split: every other partial is visible
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in tl.static_range(SPLITS):
                    total += tl.load(base + s * tile_elems + offs, cache_modifier=".cg")
                _store(C, c_desc, M, N, pid_m, pid_n, total, BLOCK_M, BLOCK_N, STORE_TMA)
