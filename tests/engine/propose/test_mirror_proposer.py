"""The mirror proposer (engine.propose.mirror): our sm90 configs nearest to the kernel
cuBLASLt runs on the problem, never beyond its reach, read from bench/cublaslt_kernels.py's JSON
or from a campaign's finals."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from engine import cli
from engine.codegen.sm90 import Sm90Config
from engine.problem import Layout, Problem
from engine.propose.mirror import MirrorFileError, MirrorProposer, load_targets, mirror_distance
from engine.propose.mix import make_proposers
from engine.propose.space import SearchSpace

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
PROBLEM = Problem(8192, 8192, 2048, Layout.NN)


def lt_kernel(tile_m=128, tile_n=256, tile_k=64, cluster=(2, 1), stages=None, splitk=1) -> dict:
    """A cuBLASLt kernel as engine.timing.cublaslt_kernels names it (our orientation)."""
    cluster_m, cluster_n = cluster if cluster else (None, None)
    label = f"algo9 {tile_m}x{tile_n}x{tile_k}"
    return {
        "algo_id": 9,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_k": tile_k,
        "stages": stages,
        "cluster_m": cluster_m,
        "cluster_n": cluster_n,
        "splitk": splitk,
        "label": label,
    }


def sm90(**knobs) -> Sm90Config:
    return Sm90Config(layout=Layout.NN, **knobs)


SPACE = SearchSpace.from_configs(
    PROBLEM,
    [
        sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop"),
        sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop", raster="n", swizzle=8),
        sm90(tile_m=128, tile_n=256, schedule="coop"),
        sm90(tile_m=128, tile_n=128, cluster_m=2, schedule="pingpong"),
        sm90(tile_m=256, tile_n=128, cluster_n=2, schedule="coop"),
        sm90(
            tile_m=128,
            tile_n=256,
            cluster_m=2,
            scheduler="streamk",
            decomposition="splitk",
            splits=4,
        ),
        sm90(tile_m=64, tile_n=64, tile_k=128, schedule="pingpong"),
    ],
)


def propose(targets, n=8, exclude=()):
    proposals = MirrorProposer(targets).propose(
        PROBLEM, SPACE, n, history=[], exclude=set(exclude), rng=random.Random(0)
    )
    return [p.config.name for p in proposals], proposals


def test_cublaslts_own_tile_and_cluster_come_first_with_the_schedulers_defaults():
    names, proposals = propose({PROBLEM.key: [lt_kernel()]}, n=3)
    assert names == [
        sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop").name,
        sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop", raster="n", swizzle=8).name,
        sm90(tile_m=128, tile_n=256, schedule="coop").name,  # the cluster differs
    ]
    assert proposals[0].proposer == "mirror"
    assert proposals[0].meta == {"cublaslt_kernel": "algo9 128x256x64", "distance": 0.0}


def test_a_split_k_kernel_is_mirrored_by_stream_k_split_k():
    names, _ = propose({PROBLEM.key: [lt_kernel(splitk=4)]}, n=1)
    assert names == [
        sm90(
            tile_m=128,
            tile_n=256,
            cluster_m=2,
            scheduler="streamk",
            decomposition="splitk",
            splits=4,
        ).name
    ]


def test_it_proposes_nothing_beyond_its_reach_and_nothing_for_an_unknown_problem():
    far = lt_kernel(tile_m=8, tile_n=8, tile_k=16, cluster=(4, 4), splitk=3)
    assert propose({PROBLEM.key: [far]})[0] == []
    assert propose({"64x64x64_nn": [lt_kernel()]})[0] == []


def test_what_was_tried_is_not_proposed_again():
    first = sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop").name
    names, _ = propose({PROBLEM.key: [lt_kernel()]}, n=1, exclude={first})
    assert names == [
        sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop", raster="n", swizzle=8).name
    ]


def test_fields_cublaslt_leaves_open_cost_nothing_but_a_tie_break():
    config = sm90(tile_m=128, tile_n=256, cluster_m=2, stages=4, schedule="coop")
    assert mirror_distance(config, lt_kernel(stages=None, cluster=None)) == pytest.approx(0.1)
    assert mirror_distance(config, lt_kernel(stages=4, cluster=None)) == 0.0
    assert mirror_distance(config, lt_kernel(stages=3)) == pytest.approx(0.5)


def test_a_later_kernel_of_the_problem_adds_its_own_nearest_configs():
    names, _ = propose(
        {PROBLEM.key: [lt_kernel(), lt_kernel(tile_m=256, tile_n=128, cluster=(1, 2))]}
    )
    assert sm90(tile_m=256, tile_n=128, cluster_n=2, schedule="coop").name in names


def test_targets_from_the_bench_json_put_the_layouts_own_kernels_first(tmp_path):
    pick, first, second = lt_kernel(), lt_kernel(tile_n=128), lt_kernel(tile_m=256)
    other = lt_kernel(tile_k=128)
    path = tmp_path / "cublaslt-kernels.json"
    path.write_text(
        json.dumps(
            {
                "kernels": {
                    "8192x8192x2048_nn": {"heuristic": [first, second], "autotune": pick},
                    "8192x8192x2048_tn": {"heuristic": [other], "autotune": None},
                }
            }
        )
    )
    targets = load_targets(path)
    assert targets["8192x8192x2048_nn"] == [pick, first, second, other]
    assert targets["8192x8192x2048_tn"] == [other, pick, first, second]


def test_targets_from_a_campaigns_finals(tmp_path):
    pick, heuristic = lt_kernel(), lt_kernel(tile_n=128)
    path = tmp_path / "grid64-nn.json"
    path.write_text(
        json.dumps(
            {
                "final": {
                    "8192x8192x2048_nn": {
                        "protocols": {},
                        "cublaslt_kernels": {
                            "cublaslt_autotune_nn": {"autotune": pick, "heuristic": heuristic},
                            "cublaslt_autotune_tn": {"autotune": heuristic, "heuristic": None},
                        },
                    }
                }
            }
        )
    )
    targets = load_targets(path)
    assert targets["8192x8192x2048_nn"] == [pick, heuristic, heuristic]
    assert targets["8192x8192x2048_tn"] == [heuristic, pick, heuristic]


def test_targets_of_several_files_merge_each_problems_kernels_in_the_files_order(tmp_path):
    """Run 14: the cublaslt stage named the heuristic's picks on all 80 problems, the finals
    named autotune's on those they re-measured; a campaign reads both."""
    bench_pick, final_pick = lt_kernel(tile_n=128), lt_kernel(tile_n=176)
    bench = tmp_path / "cublaslt-kernels.json"
    bench.write_text(
        json.dumps(
            {
                "kernels": {
                    "8192x8192x2048_nn": {"heuristic": [bench_pick], "autotune": None},
                    "4096x4096x4096_nn": {"heuristic": [bench_pick], "autotune": None},
                }
            }
        )
    )
    finals = tmp_path / "grid64-nn.json"
    pair = {"autotune": final_pick, "heuristic": bench_pick}
    finals.write_text(
        json.dumps(
            {
                "final": {
                    "8192x8192x2048_nn": {"cublaslt_kernels": {"cublaslt_autotune_nn": pair}},
                }
            }
        )
    )
    targets = load_targets(bench, finals)
    assert targets["8192x8192x2048_nn"] == [bench_pick, final_pick]
    assert targets["4096x4096x4096_nn"] == [bench_pick]
    assert load_targets(finals, bench)["8192x8192x2048_nn"] == [final_pick, bench_pick]


@pytest.mark.parametrize("text", ["{not json", '{"problems": []}'])
def test_a_file_that_names_no_kernels_is_refused_with_its_path(tmp_path, text):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(MirrorFileError, match=r"x\.json"):
        load_targets(path)


def test_the_mirror_proposer_needs_cublaslts_kernels():
    with pytest.raises(ValueError, match="cublaslt-kernels"):
        make_proposers({"mirror": 1.0})


def optimize_argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "optimize",
        "--shapes",
        "4096x4096x4096",
        "--layout",
        "tn",
        "--budget",
        "2",
        "--batch",
        "2",
        "--proposers",
        "mirror",
        "--db",
        str(tmp_path / "c.sqlite"),
        "--replay",
        str(RUN1),
        "--out",
        str(tmp_path / "results.json"),
        *extra,
    ]


def test_a_replayed_campaign_starts_from_cublaslts_kernel(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    kernels = tmp_path / "cublaslt-kernels.json"
    kernel = lt_kernel(tile_m=256, tile_n=128, cluster=(2, 1), stages=3)
    kernels.write_text(
        json.dumps({"kernels": {"4096x4096x4096_tn": {"heuristic": [], "autotune": kernel}}})
    )
    assert cli.main(optimize_argv(tmp_path, "--cublaslt-kernels", str(kernels))) == 0
    assert "mirror: cuBLASLt's kernels for 1 of 1 problems" in capsys.readouterr().out
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        rows = db.execute("SELECT name, proposer FROM candidates ORDER BY id").fetchall()
    assert rows[0] == ("hgemm_sm90_256x128x64_c2x1x1_s3_tn_coop_epitma_persistent_rn_sw8", "mirror")


def test_the_command_merges_several_kernels_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    empty, named = tmp_path / "empty.json", tmp_path / "named.json"
    empty.write_text(json.dumps({"kernels": {}}))
    kernel = lt_kernel(tile_m=256, tile_n=128, cluster=(2, 1), stages=3)
    named.write_text(
        json.dumps({"kernels": {"4096x4096x4096_tn": {"heuristic": [kernel], "autotune": None}}})
    )
    argv = optimize_argv(
        tmp_path, "--cublaslt-kernels", str(empty), "--cublaslt-kernels", str(named)
    )
    assert cli.main(argv) == 0
    assert "mirror: cuBLASLt's kernels for 1 of 1 problems" in capsys.readouterr().out


def test_the_command_asks_for_the_kernels_file(tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main(optimize_argv(tmp_path))
    assert "--cublaslt-kernels" in str(info.value.code)
    with pytest.raises(SystemExit) as info:
        cli.main(optimize_argv(tmp_path, "--cublaslt-kernels", str(RUN1)))
    assert "families-run1.json" in str(info.value.code)


def test_the_exact_mirrors_copy_tile_cluster_stages_and_split_k_in_both_schedules():
    from engine.propose.mirror import exact_mirrors

    mirrors = exact_mirrors(PROBLEM, [lt_kernel(stages=4)])
    assert [(c.schedule, c.tile_m, c.tile_n, c.cluster_m, c.stages) for c in mirrors] == [
        ("coop", 128, 256, 2, 4)  # ping-pong would hold 256 accumulators a thread: invalid
    ]
    square = exact_mirrors(PROBLEM, [lt_kernel(tile_n=128, cluster=(4, 1))])
    assert {(c.schedule, c.cluster_m) for c in square} == {("coop", 2), ("pingpong", 2)}
    split = exact_mirrors(PROBLEM, [lt_kernel(tile_n=128, splitk=6)])
    assert [(c.schedule, c.decomposition, c.splits) for c in split] == [("coop", "splitk", 4)]
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(tile_n=192)])] == [
        "hgemm_sm90_128x192x64_c2x1x1_sauto_nn_coop_epitma_persistent_rheuristic_sw1"
    ]
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(tile_n=176)])] == [
        "hgemm_sm90_128x176x64_c2x1x1_sauto_nn_coop_epitma_persistent_rheuristic_sw1"
    ]  # cuBLASLt-autotune's pick on 12288x12288x1024 and 4096x12288x8192 (2026-12-05, H200)
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(tile_n=96)])] == [
        "hgemm_sm90_128x96x64_c2x1x1_sauto_nn_coop_epitma_persistent_rheuristic_sw1",
        "hgemm_sm90_128x96x64_c2x1x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1",
    ]  # an odd tile N both schedules take
    assert exact_mirrors(PROBLEM, [lt_kernel(tile_n=112)]) == []  # no such tile in the family
    # cuBLASLt-autotune's pick on 16384x12288x512 (2026-12-05, H200): only warpgroups split
    # along N take it
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(192, 192, cluster=(1, 2))])] == [
        "hgemm_sm90_192x192x64_c1x2x1_sauto_nn_coop_wgn_epitma_persistent_rheuristic_sw1"
    ]
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(tile_n=320)])] == [
        "hgemm_sm90_128x320x64_c2x1x1_sauto_nn_coop_wgn_epitma_persistent_rheuristic_sw1"
    ]  # the heuristic's first choice on 16384x4096x8192 (2026-12-05, H200)
    # cuBLASLt-autotune's pick on 2048x128x512 (2026-12-05, H200): 48 rows, the transposed
    # problem's N
    assert [c.name for c in exact_mirrors(PROBLEM, [lt_kernel(48, 64, cluster=(4, 2))])] == [
        "hgemm_sm90_48x64x64_c2x2x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1"
    ]
    assert exact_mirrors(PROBLEM, [lt_kernel(), lt_kernel(stages=None)]) == exact_mirrors(
        PROBLEM, [lt_kernel()]
    )


def test_prebuild_builds_the_exact_mirrors_of_the_files_problems_in_its_layout(
    tmp_path, capsys, monkeypatch
):
    from engine.commands import prebuild_command as prebuild
    from tests.engine.compile_fakes import fake_nvcc

    monkeypatch.setenv("ENGINE_NVCC", str(fake_nvcc(tmp_path)))
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "cublaslt-kernels.json"
    path.write_text(
        json.dumps(
            {
                "kernels": {
                    "8192x8192x2048_nn": {"heuristic": [lt_kernel(tile_n=128)], "autotune": None},
                    "4096x4096x4096_tn": {"heuristic": [lt_kernel()], "autotune": None},
                }
            }
        )
    )
    built = []

    def fake_build_all(builds, *, jobs, config, finished):
        built.extend(b.config.render() for b in builds)
        return False

    monkeypatch.setattr(prebuild, "build_all", fake_build_all)
    cli.main(["prebuild", "--family", "sm90", "--mirror", str(path), "--layout", "nn"])
    assert len(built) == 2  # 128x128 c2x1, cooperative and ping-pong
    assert all("_nn_" in source.split("\n", 1)[0] for source in built)
    assert "2 configs (sm90 nn 2)" in capsys.readouterr().out
    built.clear()
    argv = ["prebuild", "--family", "sm90", "--mirror", str(path), "--layout", "nn"]
    cli.main([*argv, "--shapes", "4096x4096x4096,64x64x64"])
    assert built == []  # 8192x8192x2048 is not among the shapes asked for
    with pytest.raises(SystemExit, match="--family sm90"):
        cli.main(["prebuild", "--family", "sm80", "--mirror", str(path)])


def test_a_library_space_gains_the_exact_mirrors_it_lacks():
    from engine.propose.mirror import exact_mirrors, with_exact_mirrors

    library = SearchSpace.library(PROBLEM, families=("sm90", "sm80"))
    kernel = lt_kernel(tile_m=256, tile_n=128, cluster=(2, 2), stages=4)
    mirrors = exact_mirrors(PROBLEM, [kernel])
    assert mirrors
    assert not any(c.name in library for c in mirrors)  # 2x2 at 4 stages: not curated
    grown = with_exact_mirrors(library, [kernel])
    assert len(grown) == len(library) + len(mirrors)
    assert all(c.name in grown for c in mirrors)
    assert with_exact_mirrors(library, []) is library


def test_a_small_split_k_kernel_is_mirrored_by_the_sm80_split_k_tile_hopper_lacks():
    """A 64×64 split-K kernel has no Hopper copy in our families (stream-K needs the
    cooperative kernel's 128 rows); the sm80 family's 64×64 tile with as many splits is next."""
    from engine.codegen.sm80 import Sm80Config

    problem = Problem(128, 128, 16384, Layout.NN)
    sm80 = Sm80Config(layout=Layout.NN, tile_m=64, tile_n=64, tile_k=64, stages=4, splits=8)
    hopper = Sm90Config(
        layout=Layout.NN,
        tile_m=128,
        tile_n=64,
        scheduler="streamk",
        decomposition="splitk",
        splits=8,
    )
    space = SearchSpace.from_configs(problem, [hopper, sm80])
    kernel = lt_kernel(tile_m=64, tile_n=64, cluster=(1, 1), stages=4, splitk=8)
    proposals = MirrorProposer({problem.key: [kernel]}).propose(
        problem, space, 2, history=[], exclude=set(), rng=random.Random(0)
    )
    assert [p.config.name for p in proposals] == [sm80.name, hopper.name]
    assert mirror_distance(sm80, kernel) == pytest.approx(0.5)  # only the other instruction set
    same_tile = lt_kernel(tile_m=128, tile_n=64, cluster=(1, 1), splitk=8)
    assert mirror_distance(hopper, same_tile) < mirror_distance(
        Sm80Config(layout=Layout.NN, tile_m=128, tile_n=64, tile_k=64, splits=8), same_tile
    )


def test_stages_left_to_cublaslt_are_left_to_cutlass_first():
    auto = sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop")
    four = sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop", stages=4)
    assert mirror_distance(auto, lt_kernel(stages=None)) < mirror_distance(
        four, lt_kernel(stages=None)
    )
    assert mirror_distance(four, lt_kernel(stages=4)) < mirror_distance(auto, lt_kernel(stages=4))


def test_the_ranking_of_a_space_is_made_once():
    proposer = MirrorProposer({PROBLEM.key: [lt_kernel()]})
    first = proposer.ranking(PROBLEM, SPACE)
    assert proposer.ranking(PROBLEM, SPACE) is first
    names, _ = propose({PROBLEM.key: [lt_kernel()]}, n=2)
    assert names == [entry[2] for entry in first[:2]]


def test_kernels_a_gpu_step_measured_go_first_and_remake_the_ranking():
    proposer = MirrorProposer({PROBLEM.key: [lt_kernel(tile_n=128)]})
    before = proposer.ranking(PROBLEM, SPACE)
    measured = lt_kernel()  # the autotuned pick: 128x256 c2x1
    kernels = {"cublaslt_autotune_nn": {"autotune": measured, "heuristic": None}}
    proposer.learn_cublaslt_kernels(PROBLEM, kernels)
    assert proposer.targets[PROBLEM.key] == [measured, lt_kernel(tile_n=128)]
    after = proposer.ranking(PROBLEM, SPACE)
    assert after is not before
    assert after[0][2] == sm90(tile_m=128, tile_n=256, cluster_m=2, schedule="coop").name
    proposer.learn_cublaslt_kernels(PROBLEM, kernels)  # the same again: nothing to remake
    assert proposer.ranking(PROBLEM, SPACE) is after


def test_a_campaign_teaches_the_mirror_what_cublaslt_ran_beside_its_first_batch(tmp_path):
    """No file: the first batches go to the other proposers; once a GPU step has measured
    cuBLASLt, the mirror proposes the copy of its kernel."""
    from dataclasses import replace

    from engine.campaign.loop import Campaign, CampaignSettings
    from engine.campaign.storage import SqliteStorage
    from engine.execution.executor import ReplayExecutor, ReplayTable

    problem = Problem.parse("4096x4096x4096", "tn")
    table = ReplayTable.load([RUN1])
    kernel = lt_kernel(tile_m=256, tile_n=128, cluster=(2, 1), stages=3)

    class MeasuringCublasLt(ReplayExecutor):
        def execute(self, problem, batch):
            kernels = {"cublaslt_autotune_tn": {"autotune": kernel, "heuristic": None}}
            return [replace(o, cublaslt_kernels=kernels) for o in super().execute(problem, batch)]

    mix = {"mirror": 0.5, "random": 0.5}
    storage = SqliteStorage(tmp_path / "c.sqlite")
    campaign = Campaign(
        [problem],
        settings=CampaignSettings(mix=mix, budget=12, batch_size=4, seed=0),
        executor=MeasuringCublasLt(table),
        storage=storage,
        proposers=make_proposers(mix, mirror_targets={}),
        space_for=lambda p: SearchSpace.from_configs(p, table.configs_for(p)),
    )
    campaign.run()
    records = storage.candidates(campaign.settings.name, problem.key)
    mirrored = [r for r in records if r.proposer == "mirror"]
    assert mirrored, [r.proposer for r in records]
    assert min(r.round for r in mirrored) >= 1  # nothing known before the first GPU step
    assert mirrored[0].name == "hgemm_sm90_256x128x64_c2x1x1_s3_tn_coop_epitma_persistent_rn_sw8"
    assert mirrored[0].meta["distance"] == pytest.approx(0.2)
    storage.close()


def test_a_gpu_campaign_may_start_the_mirror_without_a_file(tmp_path, capsys):
    import argparse

    from engine.commands.optimize_command import mirror_targets

    args = argparse.Namespace(cublaslt_kernels=None, replay=None)
    assert mirror_targets(args, [PROBLEM]) == {}
    assert "learns cuBLASLt's kernels from each problem's GPU steps" in capsys.readouterr().out
