"""bench/replay_fresh.py: the fresh table's draw, its incremental recording (a fake timing stands
in for the GPU; the gpu-marked test records one small shape for real) and its replay."""

from __future__ import annotations

import json
import lzma
import zlib
from pathlib import Path

import pytest

from engine.execution.executor import ReplayTable
from engine.problem import Problem
from engine.timing.baseline_names import NVIDIA
from tests import bench_scripts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh():
    return bench_scripts.load("replay_fresh")


@pytest.fixture(scope="module")
def known(fresh):
    return fresh.known_shapes()


def small_doc(fresh, shapes: list[str], limits: dict[str, int]) -> dict:
    """A shapes file as ``draw`` writes it, for a few shapes and a few configs of a family."""
    names = {f: names for f, names in fresh.subset_configs({**limits}).items() if f in limits}
    return {
        "seed": 7,
        "layout": "nn",
        "shapes": [{"shape": s, "class": fresh.shape_class(fresh.parse_shape(s))} for s in shapes],
        "configs": {"rule": "test", "subset": limits, "names": names},
        "method": {"commit": None, "sha256": fresh.method_digests(), "replay": fresh.REPLAY},
    }


def fake_build(configs: list) -> dict:
    """What the GPU builder returns, every config verified (a path stands for its library)."""
    return {
        c.name: (
            {"family": c.FAMILY, "layout": c.layout.value, "knobs": c.knobs(), "verify": "ok"},
            Path(f"/nowhere/{c.name}.so"),
        )
        for c in configs
    }


def fake_seconds(problem: Problem, name: str) -> float:
    """A fixed pseudo-random time per (problem, runner), 1–3× the problem's floor."""
    spread = 1 + 2 * (zlib.crc32(f"{problem.key}/{name}".encode()) % 1000) / 1000
    return max(2 * problem.m * problem.n * problem.k / 7e14, 6e-6) * spread


def fake_row(problem: Problem, candidates: dict[str, Path]) -> dict:
    runners = [*candidates, *(f"{b}_{lay}" for b in NVIDIA for lay in ("nn", "tn"))]
    return {
        "problem": problem.key,
        "candidates": len(candidates),
        "seconds": {name: fake_seconds(problem, name) for name in runners},
        "rejected_while_timed": [],
        "environment": {"arch": "sm_90"},
    }


def test_the_draw_holds_no_recorded_shape_and_is_the_same_for_a_seed(fresh, known):
    drawn = fresh.draw_shapes(known, seed=4304)
    assert drawn == fresh.draw_shapes(known, seed=4304)
    assert drawn != fresh.draw_shapes(known, seed=4305)
    assert len(set(drawn)) == 16
    assert not set(drawn) & known
    classes = [fresh.shape_class(s) for s in drawn]
    assert {c: classes.count(c) for c in fresh.SHAPE_CLASSES} == dict.fromkeys(
        fresh.SHAPE_CLASSES, 4
    )


def test_the_recorded_shapes_include_every_table_kind_under_results(known):
    assert (4096, 4096, 4096) in known  # the library sweep tables
    assert (128, 128, 16384) in known  # longk.json.xz, compressed
    assert (1024, 128, 128) in known  # the seed proposer's recorded cuBLASLt kernels


def test_a_shape_is_found_in_any_results_file_but_a_tile_inside_a_name_is_not(fresh, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "log.txt").write_text("timed 512x256x8192_nn with hgemm_sm90_128x64x64_c1")
    (tmp_path / "a" / "b.json.xz").write_bytes(
        lzma.compress(json.dumps({"problem": {"m": 64, "n": 2048, "k": 4096}}).encode())
    )
    (tmp_path / "notes.md").write_text("| 16384×64×1024 | 0.97 |")
    found = fresh.known_shapes(tmp_path, extra=())
    assert found == {(512, 256, 8192), (64, 2048, 4096), (16384, 64, 1024)}


def test_the_committed_shapes_file_is_the_draw_of_its_seed(fresh):
    path = next((ROOT / "bench" / "results").glob("*-fresh-replay/shapes.json"), None)
    if path is None:
        pytest.skip("no shapes file committed yet")
    doc = json.loads(path.read_text())
    # what was recorded when it was drawn (a later table names the fresh shapes themselves)
    excluded = {fresh.parse_shape(s) for s in doc["excluded_shapes"]}
    bounds = fresh.long_k_bounds(doc)  # as it was drawn: the class may have moved since
    drawn = [
        fresh.shape_key(s) for s in fresh.draw_shapes(excluded, seed=doc["seed"], long_k=bounds)
    ]
    assert [entry["shape"] for entry in doc["shapes"]] == drawn
    assert doc["configs"]["names"] == fresh.subset_configs()
    assert doc["method"]["replay"] == fresh.REPLAY


def test_a_recorded_table_round_trips_into_the_replay_benchmark(fresh, tmp_path):
    doc = small_doc(fresh, ["512x512x512", "256x128x8192"], {"sm90": 4, "sm80": 4, "longk": 4})
    out = tmp_path / "table.json"
    report = fresh.record_table(
        doc, shapes_digest="abc", out=out, build=fake_build, time_shape=fake_row
    )
    assert report["not_timed"] == []
    table = ReplayTable.load([out])
    assert {p.key for p in table.problems()} == {"512x512x512_nn", "256x128x8192_nn"}
    long_k = Problem.parse("256x128x8192")
    assert {c.FAMILY for c in table.configs_for(long_k)} == {"sm90", "sm80", "longk"}
    assert json.loads(out.read_text())["fresh"]["subset"] == {"sm90": 4, "sm80": 4, "longk": 4}
    replay = fresh.replay_fresh(
        doc, [out], seeds=1, strategies=["rl", "rl+transfer", "seed", "evolve", "random"]
    )
    assert set(replay["per_shape"]) == {"512x512x512_nn", "256x128x8192_nn"}
    for stats in replay["per_shape"].values():
        assert set(stats) == {"rl", "rl+transfer", "seed", "evolve", "random"}
        for s in stats.values():
            assert 1 <= s["mean"] <= 33
            assert s["interval"][0] <= s["mean"] <= s["interval"][1]
    text = fresh.format_per_shape(replay["per_shape"], ["rl", "seed", "random"])
    assert "256x128x8192_nn" in text


def test_a_crash_keeps_the_shapes_timed_before_it_and_a_resume_times_the_rest(fresh, tmp_path):
    doc = small_doc(fresh, ["512x512x512", "1024x1024x1024"], {"sm90": 3, "sm80": 3})
    out = tmp_path / "table.json"

    def crash_on_the_second(problem, candidates):
        if problem.key == "1024x1024x1024_nn":
            raise RuntimeError("the GPU fell over")
        return fake_row(problem, candidates)

    with pytest.raises(RuntimeError):
        fresh.record_table(
            doc, shapes_digest="abc", out=out, build=fake_build, time_shape=crash_on_the_second
        )
    kept = json.loads(out.read_text())
    assert [row["problem"] for row in kept["sweep"]] == ["512x512x512_nn"]
    assert [p.key for p in ReplayTable.load([out]).problems()] == ["512x512x512_nn"]

    def nothing_built_again(configs):
        raise AssertionError(f"{len(configs)} configs built again")

    resumed = fresh.record_table(
        doc,
        shapes_digest="abc",
        out=out,
        build=nothing_built_again,
        time_shape=fake_row,
        resume=kept,
        exists=lambda _path: True,
    )
    assert [row["problem"] for row in resumed["sweep"]] == ["512x512x512_nn", "1024x1024x1024_nn"]
    rebuilt: list[str] = []

    def build_counted(configs):
        rebuilt.extend(c.name for c in configs)
        return fake_build(configs)

    fresh.record_table(  # on another machine, whose cache lacks the libraries
        doc, shapes_digest="abc", out=out, build=build_counted, time_shape=fake_row, resume=kept
    )
    assert sorted(rebuilt) == sorted(kept["configs"])
    with pytest.raises(ValueError, match="another shapes file"):
        fresh.record_table(
            doc, shapes_digest="xyz", out=out, build=fake_build, time_shape=fake_row, resume=kept
        )


def test_no_shape_starts_after_the_deadline(fresh, tmp_path):
    doc = small_doc(fresh, ["512x512x512", "1024x1024x1024", "64x64x64"], {"sm80": 2})
    ticks = iter(range(0, 1000, 50))
    report = fresh.record_table(
        doc,
        shapes_digest="abc",
        out=tmp_path / "t.json",
        build=fake_build,
        time_shape=fake_row,
        deadline=120,
        clock=lambda: next(ticks),
    )
    assert len(report["sweep"]) + len(report["not_timed"]) == 3
    assert report["not_timed"]
    assert json.loads((tmp_path / "t.json").read_text())["not_timed"] == report["not_timed"]


def test_a_config_is_verified_on_a_shape_it_is_valid_for(fresh):
    doc = small_doc(fresh, ["256x128x8192", "1024x1024x1024"], {"sm90": 2, "longk": 2})
    plan = fresh.record_plan(doc)
    choose = fresh.verify_problem(plan)
    for _, configs in plan:
        for config in configs:
            problem = choose(0, config)
            assert config.is_valid(problem)
            if config.is_valid(Problem.parse("1024x1024x1024")):
                assert problem.key == "1024x1024x1024_nn"  # a medium shape first


def test_the_replay_names_what_changed_in_the_method_since_the_draw(fresh, tmp_path):
    doc = small_doc(fresh, ["512x512x512"], {"sm80": 2})
    assert fresh.changed_method(doc) == []
    doc["method"]["sha256"]["engine/propose/seed.py"] = "0" * 64
    assert fresh.changed_method(doc) == ["engine/propose/seed.py"]
    other_policy = tmp_path / "policy.pt"
    other_policy.write_bytes(b"not the shipped one")
    changed = fresh.changed_method(doc, policy=other_policy)
    assert "engine/propose/pretrained/sm_90.pt" in changed


@pytest.mark.gpu
def test_record_times_a_small_shape_on_the_gpu(fresh, tmp_path):
    doc = small_doc(fresh, ["256x256x512"], {"sm80": 2, "triton": 2})
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps(doc))
    out = tmp_path / "table.json"
    args = ["record", "--shapes", str(shapes), "--out", str(out), "--device-seconds", "1"]
    assert fresh.main(args) == 0
    table = ReplayTable.load([out])
    problem = Problem.parse("256x256x512")
    assert table.configs_for(problem)
    assert max(table.speedups(problem, "cublaslt_autotune").values()) > 0


def test_the_replay_refuses_a_changed_method_unless_told(fresh, tmp_path, capsys):
    doc = small_doc(fresh, ["1024x1024x1024"], {"sm80": 3})
    table = tmp_path / "table.json"
    fresh.record_table(doc, shapes_digest="abc", out=table, build=fake_build, time_shape=fake_row)
    doc["method"]["sha256"]["engine/propose/seed.py"] = "0" * 64
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps(doc))
    args = ["replay", "--shapes", str(shapes), "--table", str(table), "--out", str(tmp_path / "r")]
    args += ["--seeds", "1", "--strategies", "random"]
    assert fresh.main(args) == 2
    assert "engine/propose/seed.py" in capsys.readouterr().err
    assert fresh.main([*args, "--allow-changed-method"]) == 0
    report = json.loads((tmp_path / "r").read_text())
    assert report["method_changed"] == ["engine/propose/seed.py"]
    assert set(report["per_shape"]["1024x1024x1024_nn"]) == {"random"}


def test_a_draw_records_its_long_k_bounds_and_an_older_file_its_class_text(fresh):
    assert fresh.long_k_bounds({"distribution": {"long_k_bounds": [20, 4]}}) == (20, 4)
    older = {"distribution": {"classes": {"long-K": "M·N ≤ 2^22 and K ≥ 2·max(M, N) (…)"}}}
    assert fresh.long_k_bounds(older) == (22, 2)
    assert fresh.shape_class((512, 512, 1024), (22, 2)) == "long-K"
    assert fresh.shape_class((512, 512, 1024)) != "long-K"  # the family's class now
