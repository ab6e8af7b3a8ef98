"""bench/bundle_overhead.py's logic that runs without a GPU: its arguments and its table."""

from __future__ import annotations

import pytest

from tests import bench_scripts


@pytest.fixture(scope="module")
def bench():
    return bench_scripts.load("bundle_overhead")


def sides(torch: float, op: float, direct: float) -> dict[str, float]:
    return {"torch": torch, "op": op, "direct": direct}


def test_it_needs_a_bundle_or_a_campaign(bench, tmp_path):
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", str(tmp_path)])
    args = bench.parse_args(["--zip", "b.zip", "--out", str(tmp_path)])
    assert args.ms == "1,16,128,1024,4096"
    assert (args.hidden, args.intermediate) == (4096, 14336)


def test_the_table_has_a_row_per_shape_and_m_with_every_side(bench):
    report = {
        "gemm": [
            {
                "m": 16,
                "n": 4096,
                "k": 4096,
                "layout": "tn",
                "kernel": "hgemm_sm90_x",
                "host": {k: {"us": v, "gpu_busy": True} for k, v in sides(5.5, 21.0, 7.25).items()},
                "eager_us": sides(9.0, 22.0, 10.0),
                "graph_us": {"torch": 8.0, "op": 7.5},
            }
        ],
        "mlp": [
            {
                "m": 16,
                "kernels": {"gate_up": None, "down": "hgemm_sm90_x"},
                "eager_us": sides(60.0, 70.0, 62.0),
                "graph_us": {"torch": 50.0, "op": 49.0},
            }
        ],
    }
    lines = bench.table(report).splitlines()
    assert len(lines) == 4
    assert "16x4096x4096" in lines[1]
    assert "5.50/ 21.00/  7.25" in lines[1]
    assert lines[3].startswith("16 ")
    assert "hgemm_sm90_x" in lines[3]


def test_each_side_takes_each_place_in_the_graph_replays_in_turn(bench):
    names = ["torch", "op", "direct"]
    orders = [bench.replay_order(names, i) for i in range(3)]
    assert orders == [
        ["torch", "op", "direct"],
        ["op", "direct", "torch"],
        ["direct", "torch", "op"],
    ]
    assert bench.replay_order(names, 3) == names
