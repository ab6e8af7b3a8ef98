"""bench/holdout.py without a GPU: the issue's shape classes, a seeded draw of unmeasured shapes
(so many a class, none known), and the finals read into per-class geomeans and acceptance lines."""

from __future__ import annotations

import json

import pytest

from tests.bench_scripts import load
from tests.campaign_dbs import write_campaign


@pytest.fixture(scope="module")
def holdout():
    return load("holdout")


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        ((128, 128, 16384), "long-K"),
        ((1024, 1024, 4096), "long-K"),  # M·N = 2^20, K = 4·max
        ((1024, 1024, 2048), "mid"),  # K below 4·max(M, N)
        ((1024, 1024, 1024), "small"),  # M·N·K = 2^30
        ((4096, 4096, 4096), "large"),  # 2^36
        ((2048, 4096, 4096), "mid"),
    ],
)
def test_shapes_fall_in_the_issues_classes(holdout, shape, kind):
    assert holdout.shape_class(*shape) == kind


def test_a_draw_is_seeded_takes_so_many_a_class_and_skips_known_shapes(holdout):
    known = {(128, 128, 16384), (64, 64, 64)}
    drawn = holdout.draw(7, 6, known)
    assert drawn == holdout.draw(7, 6, known)
    assert drawn != holdout.draw(8, 6, known)
    assert len(set(drawn)) == 24
    assert not set(drawn) & known
    classes = [holdout.shape_class(*s) for s in drawn]
    assert classes == [c for c in holdout.CLASSES for _ in range(6)]


def entry(shape: str, lt: float, inductor: float) -> dict:
    return {
        "problem": f"{shape}_nn",
        "best": f"kernel_for_{shape}",
        "final_speedups": {
            "device": {"cublaslt_autotune": lt, "inductor_max_autotune": inductor},
            "offline": {"cublaslt_autotune": 9.0, "inductor_max_autotune": 9.0},
        },
    }


def test_the_summary_reads_the_finals_device_ratios_per_class_and_checks_each_target(
    holdout, tmp_path, capsys
):
    report = {
        "problems": [
            entry("128x128x16384", 1.44, 1.2),  # long-K
            entry("128x64x12288", 1.0, 1.0),  # long-K
            entry("512x256x64", 1.05, 1.1),  # small
            entry("2048x4096x4096", 0.98, 1.0),  # mid
            entry("8192x8192x12288", 1.0, 0.9),  # large
            {"problem": "64x64x64_nn", "best": None, "final_error": "no kernel verified"},
        ]
    }
    result = holdout.summary(report)
    classes = result["classes"]
    assert classes["long-K"]["problems"] == 2
    assert classes["long-K"]["cublaslt_autotune"] == pytest.approx(1.2)  # √(1.44 · 1.0)
    assert classes["small"]["inductor_max_autotune"] == pytest.approx(1.1)
    assert classes["all"]["problems"] == 5
    assert result["misses"] == [{"problem": "64x64x64_nn", "why": "no kernel verified"}]
    checks = {c["what"]: c["met"] for c in result["checks"]}
    assert checks["long-K vs cuBLASLt-autotune"] is True
    assert checks["large vs cuBLASLt-autotune at least"] is True
    assert checks["mid vs cuBLASLt-autotune at least"] is False  # 0.98 < 0.99
    # 64x64x64 has no final: its class and the whole set have met nothing yet
    assert classes["small"]["cublaslt_autotune"] == pytest.approx(1.05)
    assert checks["small vs cuBLASLt-autotune"] is False
    assert checks["overall vs Inductor max-autotune"] is False

    path = tmp_path / "results.json"
    path.write_text(json.dumps(report))
    assert holdout.main(["summary", str(path), "--out", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "NOT met mid vs cuBLASLt-autotune at least: 0.980 (≥ 0.99)\n" in out
    assert "NOT met small vs cuBLASLt-autotune: 1.050 (≥ 1.04), 1 shapes without a final" in out
    assert "no final: 64x64x64_nn no kernel verified" in out
    assert json.loads((tmp_path / "s.json").read_text())["classes"]["all"]["problems"] == 5


def test_a_missing_results_file_is_named_in_a_usage_error(holdout, tmp_path, capsys):
    with pytest.raises(SystemExit):
        holdout.main(["summary", str(tmp_path / "missing.json")])
    assert "missing.json: no such results file" in capsys.readouterr().err


def device_final(kernel: str, kernel_q: tuple[float, float], lt_q: tuple[float, float]) -> dict:
    """A finals record's device protocol: the kernel and cuBLASLt-autotune's TN call, with
    their medians (mid-quartile) and interquartile ranges, in µs."""
    runners = {kernel: kernel_q, "cublaslt_autotune_tn": lt_q, "cublaslt_autotune_nn": (99, 99)}
    return {
        "protocol_revision": 2,
        "protocols": {
            "device": {
                "seconds": {name: sum(q) / 2e6 for name, q in runners.items()},
                "quartiles": {
                    name: {"p25": q[0] / 1e6, "p75": q[1] / 1e6} for name, q in runners.items()
                },
                "best_baselines": {
                    "cublaslt_autotune": {"seconds": sum(lt_q) / 2e6, "layout": "tn"}
                },
            }
        },
    }


def test_each_shape_is_judged_faster_or_tied_by_its_interquartile_intervals(holdout):
    report = {
        "problems": [entry("128x128x16384", 1.3, 1.2), entry("512x256x64", 1.02, 1.0)],
        "final": {
            # 10 µs against 13: the intervals leave 1.0 out
            "128x128x16384_nn": device_final("kernel_for_128x128x16384", (9.9, 10.1), (12.9, 13.1)),
            # 5.0 against 5.1, each ±0.2: the interval of the ratio holds 1.0
            "512x256x64_nn": device_final("kernel_for_512x256x64", (4.8, 5.2), (4.9, 5.3)),
        },
    }
    result = holdout.summary(report)
    verdicts = {row["problem"]: row["verdicts"] for row in result["rows"]}
    assert verdicts["128x128x16384_nn"]["cublaslt_autotune"] == "faster"
    assert verdicts["512x256x64_nn"]["cublaslt_autotune"] == "tied"
    assert verdicts["512x256x64_nn"]["inductor_max_autotune"] is None  # no time kept for it
    assert result["classes"]["all"]["cublaslt_autotune_verdicts"] == {"faster": 1, "tied": 1}
    table = holdout.table(result)
    assert "128x128x16384_nn long-K  1.300 faster" in table
    assert "all           2           1.152        1.095  1/1/0" in table


def test_a_row_shows_the_ratio_of_the_session_that_judged_it(holdout):
    # the report's final_speedups say 1.5; the finals' device session holds 13 µs against 10
    report = {
        "problems": [entry("128x128x16384", 1.5, 1.2)],
        "final": {
            "128x128x16384_nn": device_final("kernel_for_128x128x16384", (9.9, 10.1), (12.9, 13.1))
        },
    }
    row = holdout.summary(report)["rows"][0]
    assert row["cublaslt_autotune"] == pytest.approx(1.3)
    assert row["verdicts"]["cublaslt_autotune"] == "faster"
    assert row["inductor_max_autotune"] == pytest.approx(1.2)  # no session: the report's ratio


def test_inductors_times_from_before_protocol_revision_2_are_void_not_ratios(holdout):
    # the device protocol timed Inductor's host work until revision 2 (NOTES §41)
    old = device_final("kernel_for_512x256x64", (4.8, 5.2), (4.9, 5.3))
    del old["protocol_revision"]  # a summary from before revisions were recorded
    report = {
        "problems": [entry("128x128x16384", 1.3, 1.2), entry("512x256x64", 1.02, 9.0)],
        "final": {
            "128x128x16384_nn": device_final("kernel_for_128x128x16384", (9.9, 10.1), (12.9, 13.1)),
            "512x256x64_nn": old,
        },
    }
    result = holdout.summary(report)
    rows = {row["problem"]: row for row in result["rows"]}
    assert rows["512x256x64_nn"]["inductor_max_autotune"] is None
    assert rows["512x256x64_nn"]["void"] == ["inductor_max_autotune"]
    assert rows["512x256x64_nn"]["cublaslt_autotune"] == pytest.approx(5.1 / 5.0)  # kept
    assert result["classes"]["all"]["inductor_max_autotune"] == pytest.approx(1.2)
    checks = {c["what"]: c for c in result["checks"]}
    assert checks["overall vs Inductor max-autotune"]["void"] == 1
    assert checks["overall vs Inductor max-autotune"]["met"] is False
    table = holdout.table(result)
    assert "512x256x64_nn    small   1.020 tied            void " in table
    assert "1 shapes' times void (protocol revision 1)" in table


def test_a_campaign_cut_during_its_finals_is_read_from_its_saved_finals(holdout, tmp_path, capsys):
    from engine.execution.final import SavedFinals, final_settings
    from engine.outcomes import CandidateRecord, CandidateStatus
    from engine.problem import Layout, Problem

    shapes = {
        Problem.parse(shape, Layout.NN): [
            CandidateRecord(
                f"kernel_for_{shape}",
                "sm80",
                {"layout": "nn"},
                "rl",
                CandidateStatus.OK,
                0.1,
                seconds=1e-5,
                baselines={"cublaslt_autotune": 1.3e-5},
            )
        ]
        for shape in ("128x128x16384", "512x256x64")
    }
    db = write_campaign(
        tmp_path / "campaign.sqlite", "c", shapes, settings={"baseline": "cublaslt_autotune"}
    )
    final = device_final("kernel_for_128x128x16384", (9.9, 10.1), (12.9, 13.1))
    final["protocols"]["device"]["speedups"] = {
        "kernel_for_128x128x16384": {"cublaslt_autotune": 1.3}
    }
    final["protocols"]["device"]["rejected_while_timed"] = []
    SavedFinals(db.with_suffix(".finals.json")).add_final(
        "128x128x16384_nn",
        ["kernel_for_128x128x16384@x"],
        final,
        final_settings(("device",), 20.0, ()),
    )
    report = {  # written before the finals: the search's own best, no final
        "settings": {"baseline": "cublaslt_autotune"},
        "problems": [
            {"problem": f"{s}_nn", "best": f"kernel_for_{s}", "best_speedups": {}}
            for s in ("128x128x16384", "512x256x64")
        ],
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(report))
    assert holdout.main(["summary", str(path), "--saved-finals", str(db)]) == 0
    out = capsys.readouterr().out
    assert "128x128x16384_nn long-K  1.300 faster" in out
    assert "no final: 512x256x64_nn not re-measured" in out
    assert "NOT met overall vs cuBLASLt-autotune: 1.300 (≥ 1.03), 1 shapes without a final" in out
