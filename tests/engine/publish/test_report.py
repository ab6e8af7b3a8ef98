"""``python -m engine report``: speedups from recorded H200 sweeps, size classes, CUDA-L2's
published ratios beside ours, and the plots."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from engine import cli
from engine.publish import report
from engine.timing import physics

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
ANCHOR_HEADER = (
    "mnk,torch.matmul,cuBLAS-tn,cuBLAS-nn,cuBLAS-max,cuBLASLt-heuristic-tn,"
    "cuBLASLt-heuristic-nn,cuBLASLt-heuristic-max,cuBLASLt-auto-tuning-tn,"
    "cuBLASLt-auto-tuning-nn,cuBLASLt-auto-tuning-max"
)


def test_the_best_kernel_per_shape_is_the_fastest_verified_one_against_best_of_layouts():
    results = report.load_results([RUN1])
    point = results["4096x4096x4096_nn"].points["device"]
    row = next(
        r for r in json.loads(RUN1.read_text())["sweep"] if r["problem"] == "4096x4096x4096_nn"
    )
    configs = json.loads(RUN1.read_text())["configs"]
    candidates = {n: t for n, t in row["seconds"].items() if n in configs}
    assert point.kernel == min(candidates, key=candidates.__getitem__)
    seconds = row["seconds"]  # the autotuned pick or, where it was faster, the heuristic's
    autotune = min(
        seconds[f"cublaslt_{b}_{lay}"] for b in ("autotune", "heuristic") for lay in ("nn", "tn")
    )
    assert point.speedups()["cublaslt_autotune"] == pytest.approx(autotune / point.seconds)


def test_the_summary_geomean_matches_the_per_shape_speedups():
    results = report.load_results([RUN1])
    summary = report.summarize(results)["device"]["baselines"]["cublaslt_autotune"]
    values = [r.points["device"].speedups()["cublaslt_autotune"] for r in results.values()]
    assert summary["all"]["geomean"] == pytest.approx(
        math.exp(sum(map(math.log, values)) / len(values))
    )
    assert sum(summary[c]["shapes"] for c in report.SIZE_CLASSES if c in summary) == len(values)
    assert results["64x64x64_nn"].size_class == "small"
    assert results["8192x8192x8192_nn"].size_class == "large"


def test_the_deficit_names_the_shapes_that_lose_the_geomean_and_what_lifting_them_gives():
    results = report.load_results([RUN1])
    d = report.summarize(results)["device"]["deficit_vs_autotune"]
    speedups = {k: r.points["device"].speedups()["cublaslt_autotune"] for k, r in results.items()}
    slower = sorted((v, k) for k, v in speedups.items() if v < 1)
    assert d["slower_shapes"] == len(slower)
    assert [row["problem"] for row in d["shapes"]] == [k for _, k in slower[: report.DEFICIT_SHOWN]]
    total = sum(math.log(v) for v, _ in slower)
    first = d["shapes"][0]
    assert first["share"] == pytest.approx(math.log(first["speedup"]) / total)
    assert d["shapes"][-1]["cumulative_share"] == pytest.approx(
        sum(row["share"] for row in d["shapes"])
    )
    lifted = [
        1.0 if k in {row["problem"] for row in d["shapes"]} else v for k, v in speedups.items()
    ]
    assert d["geomean_if_shown_reached_1"] == pytest.approx(report.geomean(lifted))
    assert d["geomean"] == pytest.approx(report.geomean(list(speedups.values())))


def test_the_roofline_says_how_close_each_class_comes_to_the_gpus_limits():
    results = report.load_results([RUN1])
    peaks = report.gpu_peaks([RUN1])
    assert peaks is physics.PEAKS["H200"]
    limits = report.roofline(results, peaks)
    large = [r for r in results.values() if r.size_class == "large"]
    row = limits["classes"]["large"]
    assert row["shapes"] == len(large)
    floors = [physics.floor_seconds(r.problem, peaks) for r in large]
    ours = [f / r.points["device"].seconds for f, r in zip(floors, large, strict=True)]
    theirs = [
        f / r.points["device"].baselines["cublaslt_autotune"]
        for f, r in zip(floors, large, strict=True)
    ]
    assert row["gemmforge"] == pytest.approx(statistics.median(ours))
    assert row["cublaslt_autotune"] == pytest.approx(statistics.median(theirs))
    for values in limits["classes"].values():
        assert 0 < values["gemmforge"] < 1  # no timed kernel beats the roof
    assert report.gpu_peaks([]) is None  # no GPU named: no section


def final_protocol(seconds: dict[str, float], autotune: float) -> dict:
    return {
        "seconds": seconds,
        "speedups": {name: {} for name in seconds},
        "best_baselines": {"cublaslt_autotune": {"seconds": autotune}},
        "rejected_while_timed": [],
    }


def test_a_campaign_final_overrides_the_sweep_for_its_protocols(tmp_path):
    final = {
        "problems": [],
        "final": {
            "4096x4096x4096_nn": {
                "protocols": {
                    "device": final_protocol({"k1": 1e-4}, 0.9e-4),
                    "offline": final_protocol({"k1": 2e-4}, 2.2e-4),
                }
            }
        },
    }
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(final))
    results = report.load_results([RUN1, path])
    points = results["4096x4096x4096_nn"].points
    assert points["offline"].speedups()["cublaslt_autotune"] == pytest.approx(1.1)
    assert points["device"].kernel == "k1"
    assert points["device"].speedups()["cublaslt_autotune"] == pytest.approx(0.9)


def test_the_report_uses_one_kernel_per_shape_chosen_in_the_device_protocol(tmp_path):
    """k1 is fastest in the device protocol, k2 in offline and server: every protocol's row
    credits k1, never the best of each protocol apart."""
    final = {
        "final": {
            "4096x4096x4096_nn": {
                "protocols": {
                    "device": final_protocol({"k1": 1.0e-4, "k2": 1.1e-4}, 1.0e-4),
                    "offline": final_protocol({"k1": 2.0e-4, "k2": 1.5e-4}, 2.0e-4),
                    "server": final_protocol({"k1": 3.0e-4, "k2": 2.0e-4}, 3.0e-4),
                }
            }
        }
    }
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(final))
    results = report.load_results([path])
    points = results["4096x4096x4096_nn"].points
    assert {p: point.kernel for p, point in points.items()} == {
        "device": "k1",
        "offline": "k1",
        "server": "k1",
    }
    assert points["offline"].speedups()["cublaslt_autotune"] == pytest.approx(1.0)
    payload = report.to_json(results)["4096x4096x4096_nn"]["protocols"]
    assert {p["kernel"] for p in payload.values()} == {"k1"}


def test_a_sweeps_device_kernel_drops_another_kernels_final_offline_point(tmp_path):
    final = {
        "final": {
            "4096x4096x4096_nn": {"protocols": {"offline": final_protocol({"other": 2e-4}, 2.2e-4)}}
        }
    }
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(final))
    points = report.load_results([RUN1, path])["4096x4096x4096_nn"].points
    assert set(points) == {"device"}


def test_the_report_opens_with_the_device_headline(tmp_path):
    final = {
        "final": {
            "256x256x256_nn": {"protocols": {"device": final_protocol({"a": 1.0e-5}, 1.1e-5)}},
            "512x512x512_nn": {"protocols": {"device": final_protocol({"b": 2.0e-5}, 1.6e-5)}},
            "1024x512x512_nn": {"protocols": {"device": final_protocol({"c": 3.0e-5}, 3.0e-5)}},
        }
    }
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(final))
    results = report.load_results([path])
    headline = report.report_headline(results)
    autotune = headline.summary("cublaslt_autotune")
    assert autotune is not None
    # these finals kept no quartiles and name no GPU whose spread was measured: equal times
    # tie, and the other two ratios have no verdict (engine.timing.ratios.UNMEASURED)
    assert autotune.counts == {"faster": 0, "tied": 1, "slower": 0, "unmeasured": 2}
    assert autotune.geomean == pytest.approx((1.1 * 0.8 * 1.0) ** (1 / 3))
    assert headline.worst == ("512x512x512_nn", pytest.approx(0.8))
    text = report.markdown(results, report.summarize(results), [], environment="test")
    assert text.index("## Headline") < text.index("## device protocol")
    assert "| cuBLASLt autotuned | 0.958 | 0 | 1 | 0 | 2 |" in text
    assert "No noise was measured for some of these ratios" in text


def test_the_command_writes_tables_plots_and_the_cuda_l2_comparison(tmp_path, capsys):
    anchors = tmp_path / "anchors"
    anchors.mkdir()
    line = "4096_4096_4096,1.1,1,1,1.05,1,1,1.02,1,1,0.97"
    (anchors / "cuda_l2_h100_F32F16F16F32_speedup_offline.csv").write_text(
        f"{ANCHOR_HEADER}\n{line}\n"
    )
    out = tmp_path / "report"
    assert cli.main(["report", str(RUN1), "--out", str(out), "--anchors", str(anchors)]) == 0
    assert "geomean" in capsys.readouterr().out
    text = (out / "README.md").read_text()
    assert "cuBLASLt autotuned" in text
    assert "How close to the H200's limits (device protocol)" in text
    assert (out / "speedup-vs-size.png").stat().st_size > 1000
    assert (out / "heatmap.png").stat().st_size > 1000
    data = json.loads((out / "report.json").read_text())
    assert data["summary"]["device"]["shapes"] == 8 * 2  # the sweep: 8 shapes, both layouts
    assert data["cuda_l2_comparison"] == []  # the sweep has no offline numbers to set beside
    assert set(data["roofline"]["classes"]) <= set(report.SIZE_CLASSES)


def test_it_rejects_a_file_that_is_no_result(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(SystemExit, match="neither a family sweep nor a campaign"):
        cli.main(["report", str(path), "--out", str(tmp_path / "o")])


def test_the_environment_line_spans_the_days_of_every_run_combined(tmp_path):
    def run(day: str) -> Path:
        path = tmp_path / f"{day}.json"
        env = {"gpu_name": "NVIDIA H200", "driver": "580.159.04", "recorded_at": f"{day}T10:00"}
        path.write_text(json.dumps({"sweep": [{"environment": env}]}))
        return path

    line = report.environment_line([run("2026-12-03"), run("2026-12-04"), run("2026-12-03")])
    assert line.startswith("NVIDIA H200, driver 580.159.04")
    assert line.endswith("measured 2026-12-03 to 2026-12-04.")
    assert report.environment_line([run("2026-12-04")]).endswith("measured 2026-12-04.")
    assert report.environment_line([]) == "environment not recorded"


def test_a_report_with_both_layouts_summarises_each_layout_apart():
    results = report.load_results([RUN1])
    layouts = {r.problem.layout.value.upper() for r in results.values()}
    assert layouts == {"NN", "TN"}, "RUN1 sweeps both layouts"
    groups = report.summarize(results)["device"]["baselines"]["cublaslt_autotune"]
    assert groups["NN"]["shapes"] + groups["TN"]["shapes"] == groups["all"]["shapes"]
    only_nn = {k: r for k, r in results.items() if k.endswith("_nn")}
    nn_groups = report.summarize(only_nn)["device"]["baselines"]["cublaslt_autotune"]
    assert "NN" not in nn_groups
    assert nn_groups["all"]["geomean"] == pytest.approx(groups["NN"]["geomean"])


def campaign_final_with_kernels(choice: str = "") -> dict:
    """One shape's final: ours 1.0e-4 s, cuBLASLt-autotune 0.96e-4 s in TN, and what it ran."""
    best = {"seconds": 0.96e-4, "layout": "tn", **({"choice": choice} if choice else {})}
    return {
        "final": {
            "8192x8192x2048_nn": {
                "protocols": {
                    "device": {
                        "seconds": {"ours": 1.0e-4},
                        "speedups": {"ours": {}},
                        "best_baselines": {"cublaslt_autotune": best},
                        "rejected_while_timed": [],
                    }
                },
                "cublaslt_kernels": {
                    "cublaslt_autotune_nn": {"autotune": {"label": "algo1 128x128x64 c1x1 s4"}},
                    "cublaslt_autotune_tn": {
                        "autotune": {"label": "algo66 256x128x64 c1x2 s?"},
                        "heuristic": {"label": "algo0 128x256x64 c2x1 s?"},
                    },
                },
            }
        }
    }


@pytest.mark.parametrize(
    ("choice", "label"),
    [("", "algo66 256x128x64 c1x2 s?"), ("heuristic", "algo0 128x256x64 c2x1 s?")],
)
def test_the_report_sets_our_kernel_beside_the_one_cublaslt_autotune_ran(tmp_path, choice, label):
    """The kernel of the layout cuBLASLt-autotune was faster in; the heuristic's first choice
    where that stood in for the autotuned pick (it was faster in the same run)."""
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(campaign_final_with_kernels(choice)))
    results = report.load_results([path])
    point = results["8192x8192x2048_nn"].points["device"]
    assert point.cublaslt_kernel == label
    lines = report.kernel_pair_lines(results)
    assert f"| 8192x8192x2048_nn | 0.960 | `ours` | {label} |" in lines
    assert (
        report.to_json(results)["8192x8192x2048_nn"]["protocols"]["device"]["cublaslt_kernel"]
        == label
    )


def test_a_report_without_cublaslts_kernels_has_no_such_section():
    results = report.load_results([RUN1])
    assert report.kernel_pair_lines(results) == []


def test_shapes_whose_results_do_not_say_take_cublaslts_kernel_from_the_bench_file(tmp_path):
    kernels = tmp_path / "cublaslt-kernels.json"
    heuristic = {"label": "algo0 128x256x64 c2x1 s?"}
    tuned = {"label": "algo66 256x128x64 c1x2 s4"}
    kernels.write_text(
        json.dumps(
            {
                "kernels": {
                    "4096x4096x4096_nn": {"heuristic": [heuristic], "autotune": None},
                    "4096x4096x4096_tn": {"heuristic": [heuristic], "autotune": tuned},
                    "8192x8192x2048_nn": {"heuristic": [heuristic], "autotune": None},
                }
            }
        )
    )
    campaign = tmp_path / "campaign.json"
    campaign.write_text(json.dumps(campaign_final_with_kernels()))
    results = report.load_results([RUN1, campaign])
    assert report.fill_cublaslt_kernels(results, kernels) == 2  # 8192x8192x2048 already says
    points = {key: r.points["device"].cublaslt_kernel for key, r in results.items()}
    assert points["4096x4096x4096_nn"] == "algo0 128x256x64 c2x1 s? (heuristic's first)"
    assert points["4096x4096x4096_tn"] == "algo66 256x128x64 c1x2 s4 (tuned apart)"
    assert points["8192x8192x2048_nn"] == "algo66 256x128x64 c1x2 s?"


def test_the_command_refuses_a_kernels_file_that_is_not_one(tmp_path):
    with pytest.raises(SystemExit, match="no 'kernels'"):
        cli.main(["report", str(RUN1), "--out", str(tmp_path), "--cublaslt-kernels", str(RUN1)])


def test_a_final_with_inductor_and_tunableop_gets_their_columns_and_summary_rows(tmp_path):
    final = {
        "problems": [],
        "final": {
            "64x64x64_nn": {
                "protocols": {
                    "device": {
                        "seconds": {"k1": 6e-6},
                        "speedups": {"k1": {}},
                        "best_baselines": {
                            "cublaslt_autotune": {"seconds": 6.3e-6},
                            "inductor_max_autotune": {"seconds": 5.7e-6},
                            "tunableop": {"seconds": 6.6e-6},
                        },
                        "rejected_while_timed": [],
                    }
                }
            }
        },
    }
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(final))
    results = report.load_results([path])
    summary = report.summarize(results)
    inductor = summary["device"]["baselines"]["inductor_max_autotune"]["all"]
    assert inductor["geomean"] == pytest.approx(5.7 / 6.0)
    text = report.markdown(results, summary, [], environment="test")
    assert "| Inductor max-autotune | all | 1 | 0.950 |" in text
    assert "| Lt autotune | Inductor | TunableOp |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 64x64x64_nn | device"))
    assert row.endswith("| 1.050 | 0.950 | 1.100 |")
