"""bench/cublaslt_kernels.py: the kernels cuBLASLt's heuristic offers on the 64-shape campaign's
80 problems, named, in a JSON the mirror proposer reads (the shim is a stand-in here; the GPU
stage `bash bench/device/gpu_run.sh cublaslt` runs the real one)."""

from __future__ import annotations

import json

from engine.propose.mirror import load_targets
from tests.bench_scripts import load

bench = load("cublaslt_kernels")


class FakeShim:
    """Three algorithms per problem; algorithm i is tile id 20 + i (cuBLASLt's 128x128 on)."""

    cublaslt_version = 130100

    def cublaslt_plan(self, m, n, k, tn, workspace, max_algos):
        return 7, 3

    def cublaslt_algo_config(self, plan, algo, count):
        return [algo, 20 + algo, 1, 0, 0, 0, 16, 0, 2][:count]


def test_the_problems_are_the_campaigns_sixty_four_nn_and_sixteen_tn():
    problems = bench.problems(["nn", "tn"])
    assert len(problems) == 80
    assert sum(p[3] == "tn" for p in problems) == 16


def test_large_autotunes_every_shape_of_two_to_the_36_or_more():
    problems = bench.problems(["nn"])
    large = bench.autotuned_shapes("large", problems)
    assert large
    assert all(m * n * k >= 2**36 for m, n, k in large)
    assert (8192, 8192, 2048) in large
    assert bench.autotuned_shapes("64x64x64,128x128x128", problems) == {
        (64, 64, 64),
        (128, 128, 128),
    }
    assert bench.autotuned_shapes("", problems) == set()


def test_it_names_the_heuristics_first_algorithms_for_the_mirror_proposer(
    monkeypatch, tmp_path, capsys
):
    from engine.gpu import environment
    from engine.timing import measure

    env = type("Env", (), {"key": "env", "to_dict": lambda self: {"gpu_name": "stand-in"}})()
    monkeypatch.setattr(measure, "load_shim", lambda config: FakeShim())
    monkeypatch.setattr(environment, "collect", lambda **_: env)
    out = tmp_path / "cublaslt-kernels.json"
    assert bench.main(["--layouts", "tn", "--algos", "2", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["kernels"]) == 16
    entry = data["kernels"]["128x128x16384_tn"]
    assert entry["candidates"] == 3
    assert [k["algo_id"] for k in entry["heuristic"]] == [0, 1]
    assert entry["autotune"] is None
    assert "16 problems" in capsys.readouterr().out
    assert len(load_targets(out)["128x128x16384_tn"]) == 2
