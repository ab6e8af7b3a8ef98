"""Kernel families: legality, names, rendering, enumeration, sampling, features, compilation."""

from __future__ import annotations

import dataclasses

import pytest

from engine.codegen import FAMILIES, Sm80Config, Sm90Config, get_family
from engine.compilation import compile as comp
from engine.problem import Layout, Problem

NN, TN = Layout.NN, Layout.TN

# The extremes of every knob, spread over few compiles (each sm90 build is ~1 min on 2 cores).
SM90_EXTREMES = [
    Sm90Config(
        layout=TN,
        tile_m=256,
        tile_n=128,
        tile_k=64,
        cluster_m=2,
        cluster_n=2,
        schedule="coop",
        epilogue="tma",
        stages=0,
        scheduler="streamk",
        decomposition="splitk",
        splits=16,
        raster="n",
        swizzle=8,
    ),
    Sm90Config(
        layout=NN,
        tile_m=64,
        tile_n=64,
        tile_k=32,
        schedule="pingpong",
        epilogue="nosmem",
        stages=7,
        raster="m",
        swizzle=1,
    ),
    Sm90Config(
        layout=NN,
        tile_m=64,
        tile_n=256,
        tile_k=128,
        cluster_n=2,
        schedule="ws",
        epilogue="tma",
        stages=2,
    ),
    # a 64x128 TMA epilogue tile (the builder's own is 64x32)
    Sm90Config(layout=NN, tile_m=128, tile_n=128, cluster_m=2, schedule="pingpong", epilogue_n=128),
    # tile M 16: the transposed problem (the wgmma's M along N), as cuBLASLt runs small M
    Sm90Config(layout=NN, tile_m=16, tile_n=64, schedule="pingpong", epilogue="nosmem"),
    # warpgroups split along N: cuBLASLt's 192×192 and 128×320 (144 and 160 accumulators)
    Sm90Config(
        layout=NN,
        tile_m=192,
        tile_n=192,
        cluster_n=2,
        schedule="coop",
        warpgroups="n",
    ),
    Sm90Config(
        layout=TN,
        tile_m=128,
        tile_n=320,
        cluster_m=2,
        schedule="coop",
        warpgroups="n",
    ),
]
SM80_EXTREMES = [
    Sm80Config(
        layout=NN,
        tile_m=32,
        tile_n=256,
        tile_k=32,
        warp_m=1,
        warp_n=4,
        stages=5,
        swizzle=1,
        splits=1,
    ),
    Sm80Config(
        layout=TN,
        tile_m=256,
        tile_n=32,
        tile_k=64,
        warp_m=4,
        warp_n=1,
        stages=2,
        swizzle=8,
        splits=32,
    ),
    Sm80Config(
        layout=NN,
        tile_m=64,
        tile_n=64,
        tile_k=64,
        warp_m=2,
        warp_n=2,
        stages=4,
        splits=16,
        reduction="cluster",
    ),
    Sm80Config(
        layout=TN,
        tile_m=32,
        tile_n=128,
        tile_k=64,
        warp_m=1,
        warp_n=4,
        stages=4,
        splits=8,
        reduction="pdl",
    ),
]
EXTREMES = SM90_EXTREMES + SM80_EXTREMES


def test_the_extreme_configs_are_valid():
    for config in EXTREMES:
        assert config.is_valid(), (config.name, config.is_valid().reason)


def test_cublaslts_192_wide_tile_is_offered_where_its_accumulators_fit():
    """128×192 cooperative and 64×192 ping-pong: 96 fp32 accumulators a consumer thread."""
    for layout in (NN, TN):
        assert Sm90Config(layout=layout, tile_m=128, tile_n=192, schedule="coop").is_valid()
        assert Sm90Config(layout=layout, tile_m=64, tile_n=192, schedule="pingpong").is_valid()


def test_warpgroups_split_along_n_take_cublaslts_192x192_tile():
    """cuBLASLt-autotune's tile on 16384×12288×512 (bench/results/2026-12-05-h200-run14): 144
    accumulators a consumer thread; the builder's split along M needs a tile M that is a multiple of
    128."""
    for layout in (NN, TN):
        tile = {"layout": layout, "tile_m": 192, "tile_n": 192}
        assert Sm90Config(schedule="coop", warpgroups="n", **tile).is_valid()
        assert "multiple of 128" in Sm90Config(schedule="coop", **tile).is_valid().reason
        assert not Sm90Config(schedule="pingpong", **tile).is_valid()


def test_cublaslts_128x320_tile_is_offered_split_along_n_with_extended_wgmma_shapes():
    """The heuristic's first choice on 16384×4096×8192 (bench/results/2026-12-05-h200-run14): two
    64×160 wgmmas a warpgroup, 160 accumulators a thread; one D stage, so that the mainloop keeps
    3."""
    wide = Sm90Config(layout=NN, tile_m=128, tile_n=320, cluster_m=2, warpgroups="n")
    assert wide.is_valid()
    assert "at most 256 wide" in dataclasses.replace(wide, warpgroups="m").is_valid().reason
    assert wide.epilogue_stages_d == 1
    source = wide.render()
    assert "// tile N 320: CUTLASS selects its 64x160x16 wgmma" in source
    assert "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in source
    assert "Sm90TmaWarpSpecialized<\n    2, 1, 80, false, true>" in source
    split_192 = Sm90Config(layout=NN, tile_m=192, tile_n=192, warpgroups="n").render()
    assert "EXTENDED_MMA" not in split_192  # 96 is one of CUTLASS's default wgmma N


def test_warpgroups_split_along_n_render_their_own_mma_and_swizzle_atoms():
    config = Sm90Config(layout=NN, tile_m=192, tile_n=192, cluster_n=2, warpgroups="n")
    assert config.name == (
        "hgemm_sm90_192x192x64_c1x2x1_sauto_nn_coop_wgn_epitma_persistent_rheuristic_sw1"
    )
    source = config.render()
    assert "Layout<Shape<_1, _2, _1>>" in source  # two warpgroups side by side along N
    assert "Shape<Int<192>, Int<96>, Int<64>>" in source  # each one's share of the tile
    assert "ElementB, Int<96>, Int<64>>()" in source  # B's swizzle atom fits a half
    assert "cute::GMMA::Major::K, ElementD, _64, Int<96>>()" in source  # and so does D's
    # 3 epilogue tiles of 64 rows: C stages, D stages, 64·192 / 256 values a thread
    assert "Sm90TmaWarpSpecialized<\n    3, 2, 48, false, true>" in source
    builder = Sm90Config(layout=NN, tile_m=128, tile_n=192, cluster_n=2).render()
    assert "MainloopParts" not in builder
    assert "EpilogueParts" not in builder
    nosmem = dataclasses.replace(config, epilogue="nosmem").render()
    assert "MainloopParts" in nosmem
    assert "EpilogueParts" not in nosmem  # the builder's own direct-store epilogue


def test_a_tile_m_below_64_runs_the_transposed_problem():
    """cuBLASLt-autotune's 8- to 48-row tiles (13 of the grid's 80 problems): CUTLASS computes
    C^T = B^T·A^T, so that the wgmma's 64-row M runs along N and tile M is the wgmma's N."""
    config = Sm90Config(layout=NN, tile_m=48, tile_n=64, cluster_m=2, schedule="pingpong")
    assert config.is_valid()
    assert config.swapped
    assert config.mma_tile == (64, 48)
    assert config.name == (
        "hgemm_sm90_48x64x64_c2x1x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1"
    )
    source = config.render()
    assert "using TileShape = Shape<Int<64>, Int<48>, Int<64>>;" in source
    assert "using ClusterShape = Shape<Int<1>, Int<2>, _1>;" in source  # ours 2x1, transposed
    assert "args.problem_shape = {N, M, K, 1};" in source
    assert "ptr_A = reinterpret_cast<const ElementA*>(B);" in source
    assert "ptr_B = reinterpret_cast<const ElementB*>(A);" in source
    assert "using LayoutA = cutlass::layout::ColumnMajor;" in source  # B (KxN) as B^T (NxK)
    assert "using LayoutD = cutlass::layout::ColumnMajor;" in source  # C^T is C's memory
    assert "args.epilogue.dD = make_stride(Int<1>{}, int64_t(N), int64_t(0));" in source
    assert "// tile M 48: CUTLASS selects its 64x48x16 wgmma" in source  # an extended shape
    tn = Sm90Config(layout=TN, tile_m=32, tile_n=64, schedule="pingpong", raster="m").render()
    assert "using LayoutA = cutlass::layout::RowMajor;" in tn  # B (NxK row-major) is K-major
    assert "RasterOrder::AlongN" in tn  # along our M is along CUTLASS's N
    assert "EXTENDED_MMA" not in tn  # 32 is one of CUTLASS's default wgmma N
    untransposed = Sm90Config(layout=NN, tile_m=64, tile_n=64, schedule="pingpong").render()
    assert "args.problem_shape = {M, N, K, 1};" in untransposed
    assert "transposed" not in untransposed


def test_an_explicit_epilogue_tile_is_rendered_and_named_and_fits_the_tile():
    """Fewer, larger stores a tile where the epilogue dominates (short K): 64x128 or 128x128."""
    wide = Sm90Config(layout=NN, schedule="pingpong", epilogue_n=128)
    assert wide.name == (
        "hgemm_sm90_128x128x64_c1x1x1_sauto_nn_pingpong_epitma128_persistent_rheuristic_sw1"
    )
    assert "    Shape<_64, _128>, ElementAccumulator, float, ElementC," in wide.render()
    coop = Sm90Config(layout=TN, tile_n=256, epilogue_n=128)
    assert "    Shape<_128, _128>, ElementAccumulator, float, ElementC," in coop.render()
    assert coop.epilogue_smem == 2 * 128 * 128 * 2
    auto = Sm90Config(layout=NN, schedule="pingpong").render()
    assert "cutlass::epilogue::collective::EpilogueTileAuto" in auto


def test_cublaslts_176_wide_tile_is_offered_cooperative_with_cutlass_extended_wgmma_shapes():
    """cuBLASLt-autotune's pick on 5 large grid problems (the 2026-12-05 finals): 128×176, 2×1."""
    wide = Sm90Config(layout=NN, tile_m=128, tile_n=176, cluster_m=2, schedule="coop")
    assert wide.is_valid()
    assert not Sm90Config(layout=NN, tile_m=128, tile_n=176, schedule="pingpong").is_valid()
    source = wide.render()
    define = source.index("#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED")
    assert define < source.index('#include "cute/tensor.hpp"')
    for tile_n in (64, 128, 192, 256):  # their sources, and so their cache keys, are unchanged
        config = Sm90Config(layout=TN, tile_m=64, tile_n=tile_n, schedule="pingpong")
        assert "EXTENDED_MMA" not in config.render()


def test_the_extremes_cover_every_knob_value_at_its_ends():
    for family, configs in ((Sm90Config, SM90_EXTREMES), (Sm80Config, SM80_EXTREMES)):
        for knob, values in family.SPACE.items():
            seen = {getattr(c, knob) for c in configs}
            if knob in ("decomposition", "scheduler"):
                continue
            assert values[0] in seen or knob == "stages", (family.FAMILY, knob)
            assert values[-1] in seen, (family.FAMILY, knob)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (Sm90Config(layout=TN, tile_m=64, schedule="coop"), "cooperative"),
        (Sm90Config(layout=TN, tile_m=256, tile_n=256, schedule="coop"), "spill"),
        (Sm90Config(layout=TN, tile_m=128, tile_n=256, schedule="pingpong"), "spill"),
        (Sm90Config(layout=NN, tile_m=128, tile_n=192, schedule="pingpong"), "spill"),
        (Sm90Config(layout=NN, tile_m=256, tile_n=192, schedule="coop"), "spill"),
        (Sm90Config(layout=TN, tile_m=256, schedule="pingpong"), "cooperative schedule"),
        (Sm90Config(layout=TN, schedule="pingpong", scheduler="streamk"), "stream-K"),
        (Sm90Config(layout=TN, decomposition="splitk", splits=2), "stream-K scheduler only"),
        (Sm90Config(layout=TN, scheduler="streamk", decomposition="splitk"), "splits ≥ 2"),
        (Sm90Config(layout=TN, scheduler="streamk", splits=2), "decomposition=splitk"),
        (Sm90Config(layout=TN, tile_m=128, tile_n=256, tile_k=128, stages=7), "shared-memory"),
        (Sm90Config(layout=TN, schedule="ws", tile_m=64, swizzle=2), "not persistent"),
        (Sm90Config(layout=TN, tile_k=16), "tile_k=16"),
        (Sm90Config(layout=NN, schedule="pingpong", tile_m=64, warpgroups="n"), "only the coop"),
        (Sm90Config(layout=NN, tile_n=176, warpgroups="n"), "split over two warpgroups"),
        (Sm90Config(layout=NN, tile_m=64, tile_n=256, warpgroups="n"), "tile M ≥ 128"),
        (Sm90Config(layout=NN, tile_m=192, tile_n=256, warpgroups="n"), "spill"),
        (Sm90Config(layout=NN, tile_m=64, tile_n=320, schedule="pingpong"), "at most 256"),
        (Sm90Config(layout=NN, tile_m=32, tile_n=176, schedule="pingpong"), "one of [64, 128]"),
        (Sm90Config(layout=NN, tile_m=32, tile_n=64), "transposed problem's tile: 64x32"),
        (Sm90Config(layout=NN, tile_m=32, tile_n=128, warpgroups="n"), "split over two"),
        (Sm90Config(layout=NN, epilogue="nosmem", epilogue_n=128), "epilogue='tma'"),
        (Sm90Config(layout=NN, tile_n=192, epilogue_n=128), "must divide"),
        (Sm90Config(layout=NN, tile_m=32, tile_n=128, epilogue_n=128), "MMA tile's N 32"),
        (
            Sm90Config(layout=NN, tile_m=192, tile_n=192, warpgroups="n", stages=4),
            "shared-memory",
        ),
        (Sm80Config(layout=NN, tile_m=32, warp_m=4), "warp tiles"),
        (Sm80Config(layout=NN, warp_m=4, warp_n=4), "warps per CTA"),
        (Sm80Config(layout=NN, tile_m=256, tile_n=256, warp_m=2, warp_n=2), "spill"),
        (
            Sm80Config(layout=TN, tile_m=256, tile_n=128, tile_k=64, warp_m=4, warp_n=2, stages=5),
            "shared memory",
        ),
        (Sm80Config(layout=NN, tile_n=32, tile_k=32, warp_m=4, warp_n=2, tile_m=128), "B copy"),
        (Sm80Config(layout=NN, reduction="pdl"), "split-K choice"),
        (Sm80Config(layout=NN, splits=32, reduction="cluster"), "one cluster"),
    ],
)
def test_it_rejects_illegal_configs_with_a_reason(config, reason):
    verdict = config.is_valid()
    assert not verdict.ok
    assert reason in verdict.reason


def test_validity_depends_on_the_problem_and_arch():
    config = Sm80Config(
        layout=TN, tile_m=128, tile_n=256, tile_k=64, warp_m=2, warp_n=4, stages=4, splits=4
    )
    assert not config.is_valid(arch="sm_80")  # 196 KiB of smem
    assert config.is_valid(arch="sm_90")
    assert "layout" in config.is_valid(Problem(256, 256, 256, NN), "sm_90").reason
    assert "splits" in config.is_valid(Problem(256, 256, 64, TN), "sm_90").reason
    assert config.is_valid(Problem(256, 256, 512, TN), "sm_90")
    assert not Sm90Config(layout=TN).is_valid(arch="sm_80")


@pytest.mark.parametrize("reduction", ["pdl", "cluster"])
def test_the_fused_split_reductions_are_for_hopper_only(reduction):
    config = Sm80Config(layout=NN, splits=8, reduction=reduction)
    assert config.is_valid(arch="sm_90")
    assert config.is_valid(arch="sm_90a")
    assert "needs Hopper" in config.is_valid(arch="sm_80").reason
    assert "needs Hopper" in config.is_valid(arch="sm_89").reason
    assert config.is_valid()  # a portable build renders it; its launch fails on older GPUs


def test_the_cluster_reduction_parks_a_padded_fp32_tile_in_shared_memory():
    # 128x128x32, 2 stages: 32 KiB of pipeline, 68 KiB of padded fp32 tile
    kernel = Sm80Config(layout=NN, stages=2, splits=4)
    cluster = dataclasses.replace(kernel, reduction="cluster")
    assert kernel.smem_bytes == 2 * 256 * 32 * 2
    assert cluster.smem_bytes == 128 * (128 + 8) * 4


def test_only_the_fused_reductions_change_the_name_and_the_workspace():
    kernel = Sm80Config(layout=NN, splits=8)
    pdl = dataclasses.replace(kernel, reduction="pdl")
    cluster = dataclasses.replace(kernel, reduction="cluster")
    assert kernel.name.endswith("_splitk8")
    assert pdl.name == kernel.name + "_pdl"
    assert cluster.name == kernel.name + "_cluster"
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in pdl.render()
    assert "cudaLaunchAttributeClusterDimension" in cluster.render()
    assert "return 0;  // the splits are reduced in shared memory" in cluster.render()
    for source in (kernel.render(), pdl.render()):
        assert "return 0;  // the splits are reduced" not in source


def test_names_are_deterministic_and_distinct():
    for family in FAMILIES.values():
        configs = family.sample(200, layout=TN, seed=1)
        names = [c.name for c in configs]
        assert len(set(names)) == len(names) == 200
        assert names == [c.name for c in family.sample(200, layout=TN, seed=1)]
        assert all(n.startswith(f"hgemm_{family.FAMILY}_") for n in names)
    assert Sm90Config(layout=TN, cluster_m=2).name == (
        "hgemm_sm90_128x128x64_c2x1x1_sauto_tn_coop_epitma_persistent_rheuristic_sw1"
    )
    assert Sm80Config(layout=NN).name == "hgemm_sm80_128x128x32_w2x2_s3_nn_sw1_splitk1"


def test_sampling_is_uniform_over_valid_configs_only():
    problem = Problem(4096, 4096, 64, NN)
    configs = Sm80Config.sample(300, problem, seed=7)
    assert len(configs) == 300
    assert all(c.is_valid(problem) for c in configs)
    assert {c.layout for c in configs} == {NN}
    assert {c.tile_m for c in configs} == set(Sm80Config.SPACE["tile_m"])


def test_enumeration_yields_only_valid_configs():
    configs = list(Sm80Config.enumerate(Problem(128, 128, 128, TN)))
    assert configs
    assert all(c.is_valid(Problem(128, 128, 128, TN)) for c in configs)
    assert max(c.splits for c in configs) == 4  # K=128 has 4 tiles of 32


def test_feature_vectors_have_one_fixed_key_set_per_family():
    # longk is searched only on long-K shapes with few output tiles
    problems = (Problem(1000, 2048, 512, TN), Problem(128, 256, 8192, TN))
    for family in FAMILIES.values():
        problem, configs = next(
            (p, found) for p in problems if (found := family.sample(20, p, seed=3))
        )
        vectors = [c.features(problem) for c in configs]
        assert all(v.keys() == vectors[0].keys() for v in vectors)
        assert all(isinstance(x, float) for v in vectors for x in v.values())
        assert "problem_log2_m" in vectors[0]
        assert 0 < vectors[0]["tile_efficiency"] <= 1


def test_knobs_round_trip():
    for config in EXTREMES:
        assert type(config).from_knobs(config.knobs()) == config
    assert get_family("sm90") is Sm90Config
    with pytest.raises(KeyError, match="unknown family"):
        get_family("sm70")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_sampled_config_renders_a_complete_abi_source(family):
    cls = get_family(family)
    for layout in Layout:
        for config in cls.sample(25, layout=layout, seed=5):
            source = config.render()
            assert "${" not in source
            assert config.name in source
            for symbol in (
                "gemmforge_hgemm",
                "gemmforge_workspace_size",
                "GEMMFORGE_DEFINE_ABI_VERSION",
            ):
                assert symbol in source


def test_rendering_an_invalid_config_raises():
    bad = dataclasses.replace(Sm90Config(layout=TN), tile_m=64)
    with pytest.raises(ValueError, match="cooperative"):
        bad.render()


def test_the_layout_decides_the_b_operand():
    nn = Sm90Config(layout=NN).render()
    tn = Sm90Config(layout=TN).render()
    assert "using LayoutB = cutlass::layout::RowMajor;" in nn
    assert "using LayoutB = cutlass::layout::ColumnMajor;" in tn
    assert "SM75_U16x8_LDSM_T" in Sm80Config(layout=NN).render()
    assert "SM75_U16x8_LDSM_T" not in Sm80Config(layout=TN).render()


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_knob_extremes_compile_without_spills(engine_config):
    for family, configs in ((Sm90Config, SM90_EXTREMES), (Sm80Config, SM80_EXTREMES)):
        results = comp.compile_many(
            [c.render() for c in configs], jobs=2, archs=family.ARCHS, config=engine_config
        )
        for config, result in zip(configs, results, strict=True):
            assert result.ok, (config.name, result.error, result.log[-3000:])
            assert {r.arch for r in result.resources} == set(family.ARCHS), config.name
            assert not result.spills, config.name
            assert "C7510" not in result.log, config.name


@pytest.mark.nvcc
@pytest.mark.slow
def test_a_176_wide_tile_compiles_to_one_64x176_wgmma_per_k_step(engine_config):
    """Without CUTLASS's extended shapes the builder falls back to eleven 64x16x16 wgmmas."""
    config = Sm90Config(layout=NN, tile_m=128, tile_n=176, cluster_m=2, schedule="coop")
    [result] = comp.compile_many(
        [config.render()], jobs=1, archs=config.ARCHS, config=engine_config
    )
    assert result.ok, (result.error, result.log[-3000:])
    assert not result.spills
    [kernel] = result.resources
    assert "MMA_64x176x16_F32F16F16" in kernel.name
