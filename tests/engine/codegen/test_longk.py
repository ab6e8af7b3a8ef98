"""The longk family (Hopper cluster split-K): config space, validity, names, rendering, library,
and an sm_90a build that runs wgmma without spills; the push reduction's knob, its shared-memory
accounting, and a build whose SASS holds its bulk copies (UBLKCP); ``groups``, a tile's K over
several clusters summed in the workspace: its name, its slots, its workspace size, its build;
``multicast``, two tiles sharing P's loads: its name, its slots, its validity, its build."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from engine.codegen import FAMILIES, LongKConfig, get_family
from engine.codegen.library import library
from engine.codegen.longk import PREFETCH_FUNCTIONS, PREFETCH_L2
from engine.compilation import compile as comp
from engine.problem import Layout, Problem

NN, TN = Layout.NN, Layout.TN


def test_the_family_is_registered_under_its_name():
    assert get_family("longk") is LongKConfig
    assert FAMILIES["longk"] is LongKConfig
    assert LongKConfig.archs_for("sm_90") == ("sm_90a",)


def test_names_say_tile_stages_layout_cluster_and_swap():
    assert LongKConfig(layout=NN, tile_n=32, stages=6, splits=16).name == (
        "hgemm_longk_64x32x64_s6_nn_cluster16"
    )
    # swapped: the tile is given in C's orientation, M first
    assert LongKConfig(layout=TN, tile_n=16, splits=4, swap=True).name == (
        "hgemm_longk_16x64x64_s4_tn_cluster4_swap"
    )


def test_a_swapped_tile_puts_m_on_the_wgmma_n_side():
    assert LongKConfig(layout=NN, tile_n=32, swap=True).tile_mn() == (32, 64)
    assert LongKConfig(layout=NN, tile_n=32).tile_mn() == (64, 32)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (LongKConfig(layout=NN, tile_n=256, stages=8), "shared memory"),
        (LongKConfig(layout=NN, tile_n=96), "tile_n=96"),
        (LongKConfig(layout=NN, splits=32), "splits=32"),
        (LongKConfig(layout=NN, stages=7), "stages=7"),
    ],
)
def test_it_rejects_illegal_configs_with_a_reason(config, reason):
    verdict = config.is_valid()
    assert not verdict.ok
    assert reason in verdict.reason


def test_it_rejects_archs_without_wgmma():
    verdict = LongKConfig(layout=NN).is_valid(None, "sm_80")
    assert not verdict.ok
    assert "sm_90a" in verdict.reason


def test_it_rejects_more_splits_than_k_tiles_and_another_layout():
    config = LongKConfig(layout=NN, splits=16)
    assert config.is_valid(Problem(128, 128, 1024, NN))  # 16 K tiles of 64
    assert "only 15 tiles" in config.is_valid(Problem(128, 128, 960, NN)).reason
    assert "built for layout nn" in config.is_valid(Problem(128, 128, 4096, TN)).reason


def test_residues_in_m_n_and_k_are_valid():
    config = LongKConfig(layout=TN, tile_n=128, splits=4)
    assert config.is_valid(Problem(200, 264, 3000, TN))
    assert config.is_valid(Problem(1, 8, 8 * 64 * 4, TN))


def test_the_partial_tile_reuses_the_pipeline_memory():
    # 2 stages of (64 + 256) x 64 fp16 = 80 KiB; the fp32 tile 64 x (256 + 8) = 66 KiB
    config = LongKConfig(layout=NN, tile_n=256, stages=2)
    assert config.smem_bytes == 1024 + 2 * 320 * 128 + 2 * 2 * 8
    small = LongKConfig(layout=NN, tile_n=16, stages=2)
    assert small.partial_tile_bytes == 64 * 24 * 4
    assert small.smem_bytes == 1024 + max(2 * 80 * 128, 64 * 24 * 4) + 32


def test_one_cta_an_sm_pads_the_launchs_shared_memory_and_is_named():
    config = LongKConfig(layout=NN, tile_n=64, stages=4, splits=16, ctas_per_sm=1)
    assert config.name == "hgemm_longk_64x64x64_s4_nn_cluster16_occ1"
    assert config.natural_ctas_per_sm() == 3
    assert 2 * (config.smem_request + 1024) > 228 * 1024 >= config.smem_request + 1024
    assert "constexpr int kCtasPerSm = 1;" in config.render()
    two = LongKConfig(layout=NN, tile_n=32, stages=4, splits=8, ctas_per_sm=2)
    assert 3 * (two.smem_request + 1024) > 228 * 1024 >= 2 * (two.smem_request + 1024)


def test_it_rejects_an_occupancy_cap_that_changes_nothing():
    deep = LongKConfig(layout=NN, tile_n=128, stages=6, ctas_per_sm=1)
    assert deep.natural_ctas_per_sm() == 1
    assert "changes nothing" in deep.is_valid().reason


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("layout", [NN, TN])
def test_the_operands_majorness_follows_layout_and_swap(layout, swap):
    source = LongKConfig(layout=layout, tile_n=32, swap=swap).render()
    b_k_major = layout is TN
    assert f"constexpr bool kSwap = {'true' if swap else 'false'};" in source
    assert f"constexpr bool kBKMajor = {'true' if b_k_major else 'false'};" in source
    # the wgmma's transpose immediates: P (A side) then Q (B side), 1 for an MN-major operand
    p_mn_major = swap and not b_k_major
    q_mn_major = not swap and not b_k_major
    assert f"p, 1, 1, {int(p_mn_major)}, {int(q_mn_major)};" in source
    assert "m64n32k16.f32.f16.f16" in source


def test_the_wgmma_names_one_accumulator_register_per_two_columns():
    source = LongKConfig(layout=NN, tile_n=256).render()
    assert '"+f"(d[127])' in source
    assert '"+f"(d[128])' not in source
    assert "%128, %129, p" in source  # the two descriptors follow the accumulators


def test_non_portable_clusters_are_opted_in_by_the_launcher():
    source = LongKConfig(layout=NN, splits=16).render()
    assert "cudaFuncAttributeNonPortableClusterSizeAllowed" in source
    assert "constexpr int kSplits = 16;" in source


def test_the_library_is_valid_and_covers_the_long_k_shapes_in_one_wave():
    configs = library("longk", NN)
    assert configs
    assert all(c.is_valid() for c in configs)
    assert len({c.name for c in configs}) == len(configs)
    for shape in ("128x128x16384", "512x256x8192", "256x256x8192", "64x512x16384"):
        problem = Problem.parse(shape)
        ctas = {c.problem_fit(problem)["waves"] * 132 for c in configs if c.is_valid(problem)}
        assert any(120 <= n <= 132 for n in ctas), shape
    assert any(c.swap for c in configs)
    assert any(c.splits == 16 for c in configs)


def test_sampling_and_enumeration_give_valid_configs():
    problem = Problem(128, 256, 12288, NN)
    sampled = LongKConfig.sample(50, problem, seed=2)
    assert len(sampled) == 50
    assert all(c.is_valid(problem) for c in sampled)
    assert LongKConfig.from_knobs(sampled[0].knobs()) == sampled[0]


@pytest.mark.nvcc
def test_the_extremes_compile_to_wgmma_without_spills(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=256, stages=4, splits=16),
        LongKConfig(layout=NN, tile_n=16, stages=2, splits=3, swap=True),
        LongKConfig(layout=TN, tile_n=128, stages=8, splits=1, swap=True),
    ]
    results = comp.compile_many(
        [c.render() for c in configs], jobs=2, archs=LongKConfig.ARCHS, config=engine_config
    )
    for config, result in zip(configs, results, strict=True):
        assert result.ok, (config.name, result.error, result.log[-3000:])
        assert not result.spills, config.name
        assert "C7510" not in result.log, config.name  # wgmma serialised by ptxas


def test_the_prior_offers_distinct_tilings_that_fill_64_to_128_ctas():
    from engine.codegen.library import longk_prior

    problem = Problem(256, 256, 8192, NN)
    picks = longk_prior(problem, count=4)
    assert len(picks) == 4
    assert all(c.is_valid(problem) for c in picks)
    assert len({(*c.tile_mn(), c.splits) for c in picks}) == 4
    for config in picks:
        tm, tn = config.tile_mn()
        assert 64 <= (256 // tm) * (256 // tn) * config.splits <= 128


def test_the_prior_swaps_only_when_m_is_below_the_wgmma_m():
    from engine.codegen.library import longk_prior

    assert longk_prior(Problem(16, 4096, 16384, NN))[0].tile_mn() == (16, 64)
    assert not any(c.swap for c in longk_prior(Problem(128, 128, 16384, NN)))


def test_it_is_searched_only_on_long_k_shapes_with_few_output_tiles():
    config = LongKConfig(layout=NN, splits=8)
    assert config.is_valid(Problem(128, 128, 16384, NN))
    assert config.is_valid(Problem(264, 280, 2056, NN))  # the sanitizer's small problem
    assert (
        "not long-K with few output tiles" in config.is_valid(Problem(4096, 4096, 4096, NN)).reason
    )
    assert config.is_valid(Problem(4096, 64, 16384, NN))  # K = 4·M
    assert not config.is_valid(Problem(512, 512, 1024, NN))  # K under 4·max(M, N)
    assert not config.is_valid(Problem(2048, 2048, 16384, NN))  # M·N over 2^20


# -- reduce="push": the partial tiles meet through bulk DSMEM copies ----------------------------
PUSH_COPY = "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"


def test_push_is_named_by_a_suffix_and_pull_keeps_its_names():
    pull = LongKConfig(layout=NN, tile_n=64, stages=8, splits=16)
    assert pull.reduce == "pull"
    assert pull.name == "hgemm_longk_64x64x64_s8_nn_cluster16"
    push = LongKConfig(layout=NN, tile_n=64, stages=8, splits=16, reduce="push")
    assert push.name == "hgemm_longk_64x64x64_s8_nn_cluster16_push"
    swapped = LongKConfig(layout=TN, tile_n=64, splits=8, swap=True, ctas_per_sm=1, reduce="push")
    assert swapped.name == "hgemm_longk_64x64x64_s4_tn_cluster8_swap_occ1_push"
    assert LongKConfig.from_knobs(push.knobs()) == push
    assert LongKConfig.from_knobs({k: v for k, v in pull.knobs().items() if k != "reduce"}) == pull


def test_push_stays_out_of_the_space_the_policy_is_laid_out_by():
    assert "reduce" not in LongKConfig.SPACE
    assert all(c.reduce == "pull" for c in LongKConfig.sample(20, layout=NN, seed=1))
    assert "reduce=push" not in LongKConfig(layout=NN, reduce="push").features()


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (LongKConfig(layout=NN, splits=1, reduce="push"), "no peer"),
        (LongKConfig(layout=NN, reduce="scatter"), "reduce='scatter'"),
        (LongKConfig(layout=NN, tile_n=256, stages=8, reduce="push"), "shared memory"),
    ],
)
def test_it_rejects_illegal_push_configs_with_a_reason(config, reason):
    verdict = config.is_valid()
    assert not verdict.ok
    assert reason in verdict.reason


def test_push_counts_a_receive_slot_per_peer_and_its_mbarrier():
    # 64 rows of (64 + 8) fp32 over 12 splits: shares of 5 or 6 rows, a slot holds 6
    config = LongKConfig(layout=NN, tile_n=64, stages=2, splits=12, reduce="push")
    assert config.partial_tile_bytes == 64 * 72 * 4
    assert config.receive_slot_bytes == 6 * 72 * 4
    assert config.receive_bytes == 11 * 6 * 72 * 4
    # the partial tile and the slots outgrow 2 stages of (64 + 64) x 64 fp16
    assert config.smem_bytes == 1024 + 64 * 72 * 4 + 11 * 6 * 72 * 4 + (2 * 2 + 1) * 8
    # swapped: C's rows run along the wgmma N side, 32 rows of (64 + 4) fp32, 2 a share of 16
    swapped = LongKConfig(layout=NN, tile_n=32, splits=16, swap=True, reduce="push")
    assert swapped.receive_bytes == 15 * 2 * 68 * 4
    # where the pipeline is larger, push costs only its mbarrier
    deep = LongKConfig(layout=NN, tile_n=128, stages=8, splits=8)
    assert replace(deep, reduce="push").smem_bytes == deep.smem_bytes + 8
    assert replace(deep, reduce="push").render().count(f"kSmemBytes == {deep.smem_bytes + 8}")


def test_the_receive_slots_can_cost_an_occupancy_cap_its_point():
    pull = LongKConfig(layout=NN, tile_n=256, stages=2, splits=8, ctas_per_sm=1)
    assert pull.is_valid()  # 81 KiB: two CTAs an SM unless capped
    push = replace(pull, reduce="push")
    assert push.natural_ctas_per_sm() == 1
    assert "changes nothing" in push.is_valid().reason


def test_only_push_renders_the_bulk_copy_path():
    pull = LongKConfig(layout=TN, tile_n=64, stages=8, splits=8).render()
    push = LongKConfig(layout=TN, tile_n=64, stages=8, splits=8, reduce="push").render()
    assert PUSH_COPY not in pull
    assert "fence.proxy.async" not in pull
    assert "map_shared_rank" in pull
    assert PUSH_COPY in push
    assert "fence.proxy.async.shared::cta;" in push
    assert "mapa.shared::cluster.u32" in push
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in push
    assert "barrier.cluster.wait.acquire;" in push
    assert "map_shared_rank" not in push  # no remote loads
    assert "push_reduce(tile, received, split" in push


def test_pull_renders_the_first_designs_reduction():
    source = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8).render()
    assert source.count("cluster.sync();") == 2
    assert "constexpr int kDataBytes = kPipelineBytes > kPartialBytes ? kPipelineBytes" in source
    assert "constexpr int kSmemBytes = 1024 + kDataBytes + 2 * kStages * 8;" in source
    assert "${" not in source


def test_push_twins_are_offered_for_the_h100_winners_only_and_stay_out_of_the_search():
    from engine.codegen.library import longk_pull_library, longk_push_library

    for layout in (NN, TN):
        assert not any(c.reduce == "push" for c in library("longk", layout))
        searched = longk_pull_library(layout)
        push = longk_push_library(layout)
        tilings = {(c.tile_n, c.stages, c.splits, c.swap) for c in push}
        assert tilings == {
            (64, 8, 8, False),
            (64, 8, 16, False),
            (128, 8, 4, False),
            (128, 8, 8, False),
            (64, 12, 8, False),
            (64, 6, 8, False),
            (64, 4, 8, True),
            (64, 4, 16, True),
        }
        names = {c.name for c in searched}
        assert all(c.reduce == "push" and replace(c, reduce="pull").name in names for c in push)


def test_prefetch_is_named_by_a_suffix_and_leaves_other_sources_as_they_were():
    pull = LongKConfig(layout=NN, tile_n=64, stages=8, splits=16)
    prefetching = replace(pull, prefetch=True)
    assert prefetching.name == "hgemm_longk_64x64x64_s8_nn_cluster16_pf"
    assert replace(pull, reduce="push", prefetch=True).name.endswith("_push_pf")
    assert LongKConfig.from_knobs(prefetching.knobs()) == prefetching
    assert "prefetch=" not in " ".join(prefetching.features())
    source = prefetching.render()
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in source
    assert "if (i == kStages - 1)" in source
    assert "${" not in source
    # without the knob, not a byte of it: the pull and push sources keep their cache keys
    assert "bulk.prefetch" not in pull.render()
    without = source.replace(PREFETCH_FUNCTIONS, "").replace(PREFETCH_L2, "")
    assert without.replace(prefetching.name, pull.name) == pull.render()


def test_prefetch_twins_are_offered_for_the_push_tilings_and_stay_out_of_the_search():
    from engine.codegen.library import longk_prefetch_library, longk_push_library

    for layout in (NN, TN):
        searched = library("longk", layout)
        assert not any(c.prefetch for c in searched)
        twins = longk_prefetch_library(layout)
        assert all(c.prefetch and c.is_valid() for c in twins)
        plain = {replace(c, prefetch=False).name for c in twins}
        assert plain == {c.name for c in longk_push_library(layout)} | {
            replace(c, reduce="pull").name for c in longk_push_library(layout)
        }


def test_the_prior_keeps_to_the_searched_reductions():
    from engine.codegen.library import longk_prior

    for shape in ("128x128x16384", "512x256x8192", "256x128x4096"):
        picks = longk_prior(Problem.parse(shape), count=8)
        assert all(c.reduce in ("pull", "send") and not c.prefetch for c in picks)


@pytest.mark.nvcc
def test_push_compiles_to_bulk_copies_without_spills(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=8, splits=12, reduce="push"),
        LongKConfig(layout=TN, tile_n=32, stages=4, splits=16, swap=True, reduce="push"),
        LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, reduce="push", prefetch=True),
    ]
    for config, result in zip(configs, built_without_spills(configs, engine_config), strict=True):
        if (cuobjdump := find_cuobjdump()) is not None:
            sass = subprocess.run(
                [cuobjdump, "-sass", str(result.library)], capture_output=True, text=True
            ).stdout
            assert sass.count("UBLKCP") == config.splits - 1, config.name  # one copy a peer
            assert ("UTMAPF.L2.2D" in sass) == config.prefetch, config.name  # L2 prefetch


def built_without_spills(configs: list[LongKConfig], engine_config) -> list:
    """Each config built for sm_90a, without spills, stack or wgmma serialisation (C7510)."""
    results = comp.compile_many(
        [c.render() for c in configs], jobs=2, archs=LongKConfig.ARCHS, config=engine_config
    )
    for config, result in zip(configs, results, strict=True):
        assert result.ok, (config.name, result.error, result.log[-3000:])
        assert not result.spills, config.name
        assert all(r.stack_bytes == 0 for r in result.resources), config.name
        assert "C7510" not in result.log, config.name
    return results


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, else the one Triton ships."""
    if found := shutil.which("cuobjdump"):
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.is_file() else None


def test_groups_are_named_by_a_suffix_and_leave_other_sources_as_they_were():
    single = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8)
    grouped = replace(single, groups=4)
    assert grouped.name == "hgemm_longk_64x64x64_s8_nn_cluster8_g4"
    assert replace(grouped, swap=True, tile_n=32).name.endswith("_cluster8_g4_swap")
    assert LongKConfig.from_knobs(grouped.knobs()) == grouped
    assert "groups" not in LongKConfig.SPACE  # the shipped policy's layout stays as it is
    source = single.render()
    assert "gemmforge_workspace_size(int, int, int) { return 0; }" in source
    assert "kGroups" not in source
    assert "epoch" not in source
    assert "unsigned(kSplits));" in source


def test_groups_render_a_workspace_reduction_with_an_epoch_counter():
    source = LongKConfig(layout=TN, tile_n=64, stages=8, splits=4, groups=4).render()
    assert "${" not in source
    assert "constexpr int kGroups = 4;" in source
    assert "arrive_last(counter, p.epoch)" in source
    assert "atomicCAS(counter, seen, next)" in source
    assert "unsigned(kSplits * kGroups));" in source
    assert "clusterDim.z = unsigned(kSplits);" in source  # the cluster stays one group
    assert "if (workspace == nullptr) return int(cudaErrorInvalidValue);" in source
    assert "a tile's K runs over 4 such clusters" in source
    assert source.count("cluster.sync();") == 2


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (LongKConfig(layout=NN, splits=4, groups=0), "groups=0"),
        (LongKConfig(layout=NN, splits=4, groups=17), "groups=17"),
        (LongKConfig(layout=NN, splits=4, groups=2, reduce="push"), "push is not built"),
    ],
)
def test_it_rejects_illegal_groups_with_a_reason(config, reason):
    verdict = config.is_valid()
    assert not verdict
    assert reason in verdict.reason


def test_groups_count_every_slice_against_the_k_tiles_and_the_ctas():
    config = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, groups=4)
    assert config.is_valid(Problem(128, 128, 2048, NN))  # 32 K tiles, 32 slices
    verdict = config.is_valid(Problem(128, 128, 1984, NN))
    assert not verdict
    assert "8 splits x 4 groups" in verdict.reason
    assert config.problem_fit(Problem(128, 128, 16384, NN))["waves"] == 4 * 32 / 132


def test_groups_stay_out_of_the_search_and_the_prior():
    from engine.codegen.library import longk_groups_library, longk_prior

    for layout in (NN, TN):
        assert all(c.groups == 1 for c in library("longk", layout))
        grouped = longk_groups_library(layout)
        assert grouped
        assert all(c.groups > 1 and c.is_valid() for c in grouped)
    assert all(c.groups == 1 for c in longk_prior(Problem.parse("128x128x16384"), count=8))


def expected_workspace_bytes(config: LongKConfig, m: int, n: int) -> int:
    """The launcher's formula, written again: a counter (8 bytes) a share, in 16-byte units,
    then each group's fp32 sum of each share (the largest share, in 16-byte quads)."""
    rows, cols = config.partial_rows_and_row_bytes()[0], (64 if config.swap else config.tile_n)
    tm, tn = config.tile_mn()
    tiles = -(-m // tm) * -(-n // tn)
    counters = -(-(tiles * config.splits * 8) // 16)
    share_quads = -(-(rows * cols // 4) // config.splits)
    return 16 * (counters + tiles * config.splits * config.groups * share_quads)


@pytest.mark.nvcc
def test_groups_compile_to_one_compare_and_swap_and_size_their_workspace(engine_config):
    import ctypes

    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, groups=4),
        LongKConfig(layout=TN, tile_n=32, stages=4, splits=3, groups=2, swap=True),
    ]
    for config, result in zip(configs, built_without_spills(configs, engine_config), strict=True):
        library_file = ctypes.CDLL(str(result.library))
        library_file.gemmforge_workspace_size.restype = ctypes.c_size_t
        for m, n, k in ((128, 128, 16384), (200, 264, 3000), (40, 72, 1096)):
            size = library_file.gemmforge_workspace_size(m, n, k)
            assert size == expected_workspace_bytes(config, m, n), (config.name, m, n)
        if (cuobjdump := find_cuobjdump()) is not None:
            sass = subprocess.run(
                [cuobjdump, "-sass", str(result.library)], capture_output=True, text=True
            ).stdout
            assert sass.count("ATOMG.E.CAS.64") == 1, config.name  # one arrival a CTA


def test_multicast_is_named_by_a_suffix_and_leaves_other_sources_as_they_were():
    single = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8)
    shared = replace(single, multicast=2)
    assert shared.name == "hgemm_longk_64x64x64_s8_nn_cluster8_mc2"
    assert LongKConfig.from_knobs(shared.knobs()) == shared
    assert "multicast" not in LongKConfig.SPACE  # the shipped policy's layout stays as it is
    source = single.render()
    assert "kMulticast" not in source
    assert "multicast::cluster" not in source
    assert "const int split = int(cluster.block_rank());" in source
    assert "cluster.map_shared_rank(tile, s);" in source


def test_multicast_renders_shared_loads_crossed_releases_and_a_two_tile_cluster():
    source = LongKConfig(layout=NN, tile_n=32, stages=8, splits=8, swap=True, multicast=2).render()
    assert "${" not in source
    assert "constexpr int kMulticast = 2;" in source
    assert ".multicast::cluster" in source
    assert "load_p_share(&map_p, stage, bar, p0, kt_begin + i, member, group_mask);" in source
    assert "mbar_init(empty + 8 * s, kMulticast * kConsumerThreads / 32);" in source
    assert "mbar_arrive_remote(freed, split * kMulticast + g);" in source
    assert "cluster.map_shared_rank(tile, kMulticast * s + member);" in source
    assert "clusterDim.y = unsigned(kMulticast);" in source
    assert "kSplits * kMulticast > 8" in source  # 16 CTAs: a non-portable cluster
    assert "shared_p_map(&maps.p, p_base, p_rows, K)" in source
    # the barriers are ready before any multicast lands: one more cluster barrier, relaxed
    assert source.count("cluster.sync();") == 2
    assert source.count("barrier.cluster.arrive.relaxed.aligned") == 1
    assert "mbarrier.arrive.release.cluster" not in source


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (LongKConfig(layout=NN, splits=4, multicast=3), "multicast=3"),
        (LongKConfig(layout=NN, splits=16, multicast=2), "16 splits x 2 multicast"),
        (LongKConfig(layout=NN, splits=4, multicast=2, reduce="push"), "pull"),
        (LongKConfig(layout=NN, splits=4, multicast=2, groups=2), "pull"),
        (LongKConfig(layout=NN, splits=4, multicast=2, prefetch=True), "prefetch"),
    ],
)
def test_it_rejects_illegal_multicast_with_a_reason(config, reason):
    verdict = config.is_valid()
    assert not verdict
    assert reason in verdict.reason


def test_multicast_needs_two_tiles_along_q_and_rounds_the_grid_up_to_pairs():
    config = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, multicast=2)
    verdict = config.is_valid(Problem(128, 64, 16384, NN))
    assert not verdict
    assert "1 tile(s) along the wgmma N side" in verdict.reason
    swapped = replace(config, swap=True, tile_n=32)
    assert swapped.is_valid(Problem(64, 64, 16384, NN))  # M = 64 is two 32-wide tiles along Q
    # 264 columns are 5 tiles of 64: the grid holds 3 pairs, 2 row tiles, 8 splits
    assert config.problem_fit(Problem(128, 264, 16384, NN))["waves"] == 2 * 6 * 8 / 132


def test_the_ctas_of_a_launch_count_tiles_times_splits():
    config = LongKConfig(layout=NN, tile_n=32, stages=8, splits=16, swap=True)
    assert config.ctas(Problem(64, 512, 16384, NN)) == 8 * 2 * 16  # swapped: P runs along N


def test_a_multicast_launch_counts_its_q_tiles_in_whole_pairs():
    config = LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, multicast=2)
    assert config.ctas(Problem(128, 264, 16384, NN)) == 2 * 6 * 8  # 5 tiles along N: 3 pairs


def test_multicast_twins_are_offered_for_tilings_of_at_most_8_splits_and_stay_out_of_the_search():
    from engine.codegen.library import (
        LONGK_MULTICAST_TILINGS,
        longk_multicast_library,
        longk_prior,
        longk_pull_library,
    )

    for layout in (NN, TN):
        assert all(c.multicast == 1 for c in library("longk", layout))
        shared = longk_multicast_library(layout)
        assert len(shared) == len(LONGK_MULTICAST_TILINGS)
        assert all(c.multicast == 2 and c.splits <= 8 and c.is_valid() for c in shared)
        twins = {c.name for c in longk_pull_library(layout)}
        assert all(c.name.removesuffix("_mc2") in twins for c in shared)
    assert all(c.multicast == 1 for c in longk_prior(Problem.parse("128x128x16384"), count=8))


@pytest.mark.nvcc
def test_multicast_compiles_to_multicast_loads_without_spills(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=8, splits=8, multicast=2),
        LongKConfig(layout=NN, tile_n=32, stages=4, splits=4, swap=True, multicast=2),
        LongKConfig(layout=TN, tile_n=128, stages=6, splits=4, multicast=2),
    ]
    for config, result in zip(configs, built_without_spills(configs, engine_config), strict=True):
        if (cuobjdump := find_cuobjdump()) is not None:
            sass = subprocess.run(
                [cuobjdump, "-sass", str(result.library)], capture_output=True, text=True
            ).stdout
            assert "UTMALDG.2D.MULTICAST" in sass, config.name
            # no GPU-wide memory barrier in the main loop (a cluster-scope release on each
            # stage's release made it four times slower on an H100): only the reduction's two
            # cluster barriers hold one
            assert sass.count("MEMBAR.ALL.GPU") == 2, config.name


def test_send_is_named_by_a_suffix_needs_a_peer_and_leaves_other_sources_as_they_were():
    pulled = LongKConfig(layout=NN, tile_n=64, stages=8, splits=16)
    sent = replace(pulled, reduce="send")
    assert sent.name == pulled.name + "_send"
    assert sent.is_valid()
    assert not LongKConfig(layout=NN, splits=1, reduce="send").is_valid()
    assert "groups" in LongKConfig(layout=NN, splits=4, groups=2, reduce="send").is_valid().reason
    source = sent.render()
    assert "send_reduce(acc, data + kPipelineBytes, received, split" in source
    assert "cluster.sync()" not in source.split("__global__")[1]  # no cluster barrier after it
    assert "cluster.map_shared_rank" not in source
    assert "float* tile" not in source  # it parks no partial tile: it sends from registers
    assert "send_reduce" not in pulled.render()
    assert "float* tile" in pulled.render()


def test_send_keeps_its_receive_slots_past_the_pipeline():
    config = LongKConfig(layout=NN, tile_n=128, stages=8, splits=4, reduce="send")
    # 32 register pairs a thread over 4 CTAs: 8 each, a float2 per consumer thread, 3 peers
    assert config.send_receive_bytes == 3 * 8 * 128 * 8
    assert config.smem_bytes == 1024 + config.pipeline_bytes + config.send_receive_bytes + 17 * 8


def test_the_search_reduces_unswapped_tiles_up_to_64_wide_by_send_and_the_rest_by_pull():
    from engine.codegen.library import longk_prior, longk_pull_library, longk_send_library

    for layout in (NN, TN):
        searched = library("longk", layout)
        pulled = longk_pull_library(layout)
        # the same tilings, one reduction each
        assert [replace(c, reduce="pull") for c in searched] == pulled
        for c in searched:
            sends = not c.swap and c.tile_n <= 64
            assert c.reduce == ("send" if sends else "pull"), c.name
        # the bench's send twins: pull configs the winners' tilings name, swapped ones included
        sent = longk_send_library(layout)
        assert sent
        assert all(c.reduce == "send" and c.is_valid() for c in sent)
        assert {c.name.removesuffix("_send") for c in sent} <= {c.name for c in pulled}
    prior = longk_prior(Problem.parse("128x128x16384"), count=8)
    assert {c.name for c in prior} <= {c.name for c in library("longk", NN)}
    assert any(c.reduce == "send" for c in prior)


@pytest.mark.nvcc
def test_send_compiles_to_dsmem_stores_without_a_gpu_wide_memory_barrier(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=8, splits=16, reduce="send"),
        LongKConfig(layout=TN, tile_n=32, stages=4, splits=12, swap=True, reduce="send"),
        LongKConfig(layout=NN, tile_n=128, stages=8, splits=4, reduce="send"),
    ]
    for config, result in zip(configs, built_without_spills(configs, engine_config), strict=True):
        if (cuobjdump := find_cuobjdump()) is not None:
            sass = subprocess.run(
                [cuobjdump, "-sass", str(result.library)], capture_output=True, text=True
            ).stdout
            assert "STAS.64" in sass, config.name  # st.async of a register pair
            assert "MEMBAR.ALL.GPU" not in sass, config.name


def test_interleave_is_named_by_a_suffix_and_leaves_other_sources_as_they_were():
    sliced = LongKConfig(layout=NN, tile_n=64, stages=4, splits=8, swap=True)
    dealt = replace(sliced, interleave=True)
    assert dealt.name == sliced.name + "_il"
    assert LongKConfig.from_knobs(dealt.knobs()) == dealt
    assert "interleave" not in LongKConfig.SPACE  # the shipped policy's layout stays as it is
    source = sliced.render()
    assert "split + i * kSplits" not in source
    assert "(&map_q, stage + kPBytes, bar, q0, kt_begin + i);" in source
    assert "(&map_p, stage, bar, p0, kt_begin + i);" in source


def test_interleave_deals_both_operands_k_tiles_to_the_clusters_ctas_in_turn():
    source = LongKConfig(layout=NN, tile_n=64, stages=4, splits=8, interleave=True).render()
    assert "${" not in source
    assert "(&map_p, stage, bar, p0, split + i * kSplits);" in source
    assert "(&map_q, stage + kPBytes, bar, q0, split + i * kSplits);" in source
    assert "const int kt_end = (p.k_tiles - split + kSplits - 1) / kSplits;" in source
    assert "kt_begin + i" not in source


@pytest.mark.parametrize("k_tiles", [1, 7, 8, 9, 63, 256])
@pytest.mark.parametrize("splits", [2, 3, 8, 16])
def test_the_interleaved_ctas_take_every_k_tile_once(k_tiles, splits):
    # the rendered C++ expressions, evaluated with non-negative integer division as C++ does here
    source = LongKConfig(layout=NN, splits=splits, interleave=True).render()
    [count] = re.findall(r"const int kt_end = (.*);", source)
    [tile_of] = re.findall(r"\(&map_q, stage \+ kPBytes, bar, q0, (.*)\);", source)

    def evaluate(expression: str, **names: int) -> int:
        python = expression.replace("p.k_tiles", "k_tiles").replace("/", "//")
        return eval(python, {}, {"k_tiles": k_tiles, "kSplits": splits, **names})

    taken = sorted(
        evaluate(tile_of, split=split, i=i)
        for split in range(splits)
        for i in range(evaluate(count, split=split))
    )
    assert taken == list(range(k_tiles))


@pytest.mark.parametrize(
    "config",
    [
        LongKConfig(layout=NN, splits=4, groups=2, interleave=True),
        LongKConfig(layout=NN, splits=4, multicast=2, interleave=True),
        LongKConfig(layout=NN, splits=4, prefetch=True, interleave=True),
    ],
)
def test_it_rejects_interleave_beside_groups_multicast_or_prefetch(config):
    verdict = config.is_valid()
    assert not verdict
    assert "interleave" in verdict.reason


def test_interleaved_twins_are_offered_for_4_splits_and_more_and_stay_out_of_the_search():
    from engine.codegen.library import longk_interleave_library, longk_prior

    for layout in (NN, TN):
        assert not any(c.interleave for c in library("longk", layout))
        dealt = longk_interleave_library(layout)
        assert dealt
        assert all(c.interleave and c.splits >= 4 and c.is_valid() for c in dealt)
        searched = {c.name for c in library("longk", layout)}
        assert all(c.name.removesuffix("_il") in searched for c in dealt)
    assert not any(c.interleave for c in longk_prior(Problem.parse("2048x64x16384"), count=8))


@pytest.mark.nvcc
def test_interleave_compiles_without_spills(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=4, splits=8, swap=True, interleave=True),
        LongKConfig(layout=NN, tile_n=64, stages=6, splits=8, reduce="send", interleave=True),
    ]
    assert len(built_without_spills(configs, engine_config)) == len(configs)


def test_evict_first_a_is_named_by_a_suffix_and_hints_only_as_loads():
    for swap in (False, True):
        plain = LongKConfig(layout=NN, tile_n=64, stages=4, splits=8, swap=swap)
        hinted = replace(plain, evict_first_a=True)
        assert hinted.name == plain.name + "_efa"
        assert LongKConfig.from_knobs(hinted.knobs()) == hinted
        assert "evict_first" not in plain.render()
        source = hinted.render()
        assert "${" not in source
        assert "createpolicy.fractional.L2::evict_first.b64" in source
        # A is P unswapped and Q swapped: only its load takes the hint
        p_loader = "load_operand" if swap else "load_evict_first"
        q_loader = "load_evict_first" if swap else "load_operand"
        assert f"{p_loader}<kPKMajor, kTileP, kPWidth>(&map_p, stage, bar" in source
        assert f"{q_loader}<kQKMajor, kTileQ, kQWidth>(&map_q, stage + kPBytes" in source
    assert "evict_first_a" not in LongKConfig.SPACE
    assert "multicast" in LongKConfig(layout=NN, multicast=2, evict_first_a=True).is_valid().reason


def test_evict_first_twins_stay_out_of_the_search():
    from engine.codegen.library import longk_evict_library

    for layout in (NN, TN):
        assert not any(c.evict_first_a for c in library("longk", layout))
        searched = {c.name for c in library("longk", layout)}
        hinted = longk_evict_library(layout)
        assert hinted
        assert all(c.name.removesuffix("_efa") in searched for c in hinted)


@pytest.mark.nvcc
def test_evict_first_a_compiles_to_hinted_tma_loads(engine_config):
    configs = [
        LongKConfig(layout=NN, tile_n=64, stages=4, splits=8, swap=True, evict_first_a=True),
        LongKConfig(layout=TN, tile_n=128, stages=4, splits=4, evict_first_a=True),
    ]
    for config, result in zip(configs, built_without_spills(configs, engine_config), strict=True):
        if (cuobjdump := find_cuobjdump()) is not None:
            sass = subprocess.run(
                [cuobjdump, "-sass", str(result.library)], capture_output=True, text=True
            ).stdout
            loads = [line for line in sass.splitlines() if "UTMALDG.2D" in line]
            assert any("desc[" in line for line in loads), config.name  # A's, with the policy
            assert any("desc[" not in line for line in loads), config.name  # B's, without
