"""bench/llama_proof.py's logic that runs without a GPU: its arguments, the Llama layer's shapes,
the rows (a test double times the sides), the summary and the table."""

from __future__ import annotations

import json

import pytest
import torch

from tests import bench_scripts


@pytest.fixture(scope="module")
def proof():
    return bench_scripts.load("llama_proof")


# a test double for the GPU: each side's time is fixed per side; graph mode is device time
TIMES = {"torch": 10.0, "torch_again": 10.1, "bundle": 9.0, "tunableop": 9.5, "compile": 11.0}
HOST = {"torch": 5.0, "torch_again": 5.0, "bundle": 5.5, "tunableop": 7.0, "compile": 30.0}


class FakeTimer:
    def __init__(self) -> None:
        self.graphed: list[list[str]] = []

    def host(self, fn) -> float:
        return HOST[fn.side]

    def eager(self, fn) -> float:
        return TIMES[fn.side] + HOST[fn.side]

    def graph(self, sides) -> dict[str, float]:
        self.graphed.append(sorted(sides))
        return {name: TIMES[name] for name in sides}


def side(name: str, value: torch.Tensor):
    def fn():
        return value

    fn.side = name
    return fn


def fake_sides(p, m, wanted):
    out = torch.ones(m, p.n)
    return {s: side(s, out) for s in wanted}, f"hgemm_for_{p.n}x{p.k}" if m < 100 else None


def fake_mlp(m, hidden, intermediate, wanted):
    out = torch.ones(m, hidden)
    return {s: side(s, out) for s in wanted}, {"gate/up": "cublaslt_x", "down": None}


def test_it_needs_a_bundle_and_keeps_torch_and_the_bundle_among_the_sides(proof, tmp_path):
    with pytest.raises(SystemExit):
        proof.parse_args(["--out", str(tmp_path)])
    args = proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path)])
    assert args.ms == "1,16,128,1024,4096"
    assert proof.sides_of(args) == ["torch", "torch_again", "bundle", "tunableop", "compile"]
    with pytest.raises(SystemExit):
        proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path), "--sides", "torch,compile"])
    with pytest.raises(SystemExit):
        proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path), "--sides", "torch,bundle,x"])


def test_a_llama_layer_has_four_projection_shapes(proof):
    shapes = proof.projections(4096, 14336, 32, 8)
    assert [(p.names, p.n, p.k) for p in shapes] == [
        ("q/o", 4096, 4096),
        ("k/v", 1024, 4096),
        ("gate/up", 14336, 4096),
        ("down", 4096, 14336),
    ]


def test_it_prints_every_projection_at_every_m_for_a_campaign_without_a_bundle(proof, capsys):
    assert proof.main(["--print-shapes", "--ms", "1,128"]) == 0
    shapes = capsys.readouterr().out.strip().split(",")
    assert shapes == [
        "1x4096x4096",
        "1x1024x4096",
        "1x14336x4096",
        "1x4096x14336",
        "128x4096x4096",
        "128x1024x4096",
        "128x14336x4096",
        "128x4096x14336",
    ]
    with pytest.raises(SystemExit):
        proof.parse_args(["--ms", "1"])  # a measurement needs its bundle and its folder


def test_every_projection_and_the_block_is_timed_at_every_m_in_every_mode(proof, tmp_path):
    args = proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path), "--ms", "1,128"])
    saved = []
    timer = FakeTimer()
    report = proof.measure(
        args,
        timer,
        make_projection=fake_sides,
        make_mlp=fake_mlp,
        save=lambda r: saved.append(json.dumps(r)),
    )
    rows = report["rows"]
    assert [(r["part"], r["m"]) for r in rows] == [
        ("q/o", 1), ("q/o", 128), ("k/v", 1), ("k/v", 128),
        ("gate/up", 1), ("gate/up", 128), ("down", 1), ("down", 128),
        ("mlp", 1), ("mlp", 128),
    ]  # fmt: skip
    assert len(saved) == len(rows) + 1  # after every row, and with the summary
    assert rows[0]["served"] == "hgemm_for_4096x4096"
    assert rows[1]["served"] is None
    assert rows[0]["max_abs_diff_vs_torch"] == dict.fromkeys(TIMES, 0.0)
    assert "errors" not in rows[0]
    assert rows[0]["us"]["graph"] == TIMES
    assert rows[0]["us"]["host"] == HOST
    assert timer.graphed[0] == sorted(TIMES)  # every side captured, replayed together


class FailingTimer(FakeTimer):
    """Capturing the compile side fails, as a side that cannot be captured would."""

    def graph(self, sides) -> dict[str, float]:
        if "compile" in sides:
            raise RuntimeError("operation not permitted when stream is capturing")
        return super().graph(sides)


def test_a_side_that_fails_is_left_out_of_that_mode_with_its_error(proof, tmp_path):
    args = proof.parse_args(
        ["--zip", "b.zip", "--out", str(tmp_path), "--ms", "16", "--parts", "proj"]
    )

    def wrong_shape(p, m, wanted):
        sides, served = fake_sides(p, m, wanted)
        sides["tunableop"] = side("tunableop", torch.ones(m + 1, p.n))  # cannot be compared
        return sides, served

    report = proof.measure(args, FailingTimer(), make_projection=wrong_shape, make_mlp=fake_mlp)
    first = report["rows"][0]
    assert set(first["us"]["graph"]) == {"torch", "torch_again", "bundle"}  # each captured alone
    assert "compile" in first["us"]["eager"]
    assert "tunableop" not in first["us"]["eager"]  # failed its check: not timed
    assert "check:tunableop" in first["errors"]
    assert "graph:compile" in first["errors"]
    assert "stream is capturing" in first["errors"]["graph"]
    assert proof.table(report)  # the table shows what was measured


def test_the_summary_gives_the_bundle_over_each_side_and_its_added_host_time(proof):
    rows = [
        {"part": "q/o", "us": {"graph": {"torch": 10.0, "bundle": 8.0}, "eager": {},
                               "host": {"torch": 5.0, "bundle": 5.5}}},
        {"part": "q/o", "us": {"graph": {"torch": 9.8, "bundle": 10.0}, "eager": {},
                               "host": {"torch": 5.0, "bundle": 5.25}}},
        {"part": "mlp", "us": {"graph": {"torch": 30.0, "bundle": 30.0, "compile": 27.0},
                               "eager": {}, "host": {"torch": 20.0, "bundle": 20.5}}},
    ]  # fmt: skip
    s = proof.summary(rows)
    graph = s["proj"]["graph"]["torch"]
    assert graph["geomean"] == pytest.approx((10 / 8 * 9.8 / 10) ** 0.5)
    assert graph["worst"] == pytest.approx(0.98)
    assert (graph["at_least_0.99"], graph["of"]) == (1, 2)
    assert s["proj"]["host_us_over_torch"]["max"] == pytest.approx(0.5)
    assert s["mlp"]["graph"]["compile"]["worst"] == pytest.approx(0.9)
    assert s["mlp"]["rows"] == 1


def test_the_summary_gives_torchs_spread_against_itself_as_the_noise(proof):
    rows = [
        {"part": "q/o", "us": {"graph": {"torch": 10.0, "torch_again": 10.2, "bundle": 9.6},
                               "eager": {}, "host": {}}},
        {"part": "q/o", "us": {"graph": {"torch": 9.9, "torch_again": 9.8, "bundle": 9.9},
                               "eager": {}, "host": {}}},
    ]  # fmt: skip
    graph = proof.summary(rows)["proj"]["graph"]
    assert graph["torch_vs_itself"]["low"] == pytest.approx(10.0 / 10.2)
    assert graph["torch_vs_itself"]["high"] == pytest.approx(9.9 / 9.8)
    assert set(graph) == {"torch_vs_itself", "torch"}  # the bundle is not read against it


def test_the_table_shows_every_side_in_every_mode_and_what_the_bundle_served(proof, tmp_path):
    args = proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path), "--ms", "16"])
    report = proof.measure(args, FakeTimer(), make_projection=fake_sides, make_mlp=fake_mlp)
    text = proof.table(report)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["part", "shape", "M", "mode"]
    assert "torch" in lines[0]
    assert "compile" in lines[0]
    graph_rows = [line for line in lines if " graph " in line and "x" in line.split()[1]]
    assert len(graph_rows) == 4
    assert "hgemm_for_4096x4096" in graph_rows[0]
    assert any("gate/up: cublaslt_x, down: torch.matmul" in line for line in lines)
    assert "proj graph: bundle vs torch: geomean 1.111x" in text
    assert "proj host: bundle - torch.matmul: max +0.50 µs" in text
    assert "proj graph: torch vs itself (the noise): 0.990x to 0.990x" in text
    assert "bundle vs torch_again" not in text


def test_a_resumed_run_keeps_the_earlier_rows_and_measures_only_the_rest(proof, tmp_path):
    args = proof.parse_args(["--zip", "b.zip", "--out", str(tmp_path), "--ms", "1,128"])
    first = proof.measure(args, FakeTimer(), make_projection=fake_sides, make_mlp=fake_mlp)
    env = {"gpu": "H100", "driver": "580", "date": "2026-12-06T22:00:00+00:00"}
    table = [[4096, 4096, "tn", 1, "hgemm_for_4096x4096"]]
    earlier = {"environment": env, "table": table, "rows": first["rows"][:3]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))

    later = {"environment": {**env, "date": "2026-12-06T22:09:00+00:00"}, "table": table}
    kept = proof.resumed_rows(tmp_path / "earlier.json", later)
    assert kept == first["rows"][:3]
    measured = []

    def counting_sides(p, m, wanted):
        measured.append((p.names, m))
        return fake_sides(p, m, wanted)

    report = proof.measure(
        args, FakeTimer(), make_projection=counting_sides, make_mlp=fake_mlp,
        report={"rows": kept},
    )  # fmt: skip
    assert measured == [("k/v", 128), ("gate/up", 1), ("gate/up", 128), ("down", 1), ("down", 128)]
    assert [(r["part"], r["m"]) for r in report["rows"]] == [
        (r["part"], r["m"]) for r in first["rows"]
    ]
    assert report["summary"] == first["summary"]


def test_it_does_not_resume_rows_of_another_gpu_or_another_bundle(proof, tmp_path):
    earlier = {"environment": {"gpu": "H200"}, "table": [], "rows": [{"part": "q/o", "m": 1}]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    path = tmp_path / "earlier.json"
    assert proof.resumed_rows(path, {"environment": {"gpu": "H200"}, "table": []}) != []
    assert proof.resumed_rows(path, {"environment": {"gpu": "H100"}, "table": []}) == []
    assert proof.resumed_rows(path, {"environment": {"gpu": "H200"}, "table": [[1]]}) == []
    assert proof.resumed_rows(tmp_path / "missing.json", {"environment": {}, "table": []}) == []


def test_its_torch_settings_exist_in_this_torch(proof):
    # it ran first on the GPU machine, where a TunableOp call missing from torch 2.11 failed
    proof.configure_torch()
    assert torch._dynamo.config.recompile_limit == 1024
