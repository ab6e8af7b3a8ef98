"""Every surface divides a baseline by a kernel time from the same measurement session.

The campaign built here has one shape and one kernel, measured twice:
- the search round: kernel 0.90e-4 s, every baseline 0.97e-4 s: ×1.078, faster;
- the final re-measurement: kernel 1.00e-4 s, every baseline 0.99e-4 s: ×0.990, slower.
Mixing them (the final's baseline over the search's kernel time) would say ×1.100, faster. The
dashboard shows the final session (engine.timing.ratios.SESSION_ORDER): ×0.990, slower, everywhere;
the candidate page also shows the search session's own ×1.078, never ×1.100.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from engine.outcomes import CandidateRecord
from engine.problem import Problem as EngineProblem
from engine.propose.space import SearchSpace
from engine.publish import report as engine_report
from tests.campaign_dbs import write_campaign
from webapp.campaigns.models import Campaign, Candidate

pytestmark = pytest.mark.django_db

SHAPE = EngineProblem.parse("2048x2048x2048", "nn")
BASELINES = ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")
# beyond the H200's measured 2 % spread (engine.timing.ratios.MEASURED_SPREAD) either way
SEARCH_KERNEL, SEARCH_BASELINE = 0.90e-4, 0.99e-4
FINAL_KERNEL, FINAL_BASELINE = 1.00e-4, 0.96e-4
SHOWN = FINAL_BASELINE / FINAL_KERNEL  # 0.960, slower
SEARCH = SEARCH_BASELINE / SEARCH_KERNEL  # 1.100, faster
MIXED = FINAL_BASELINE / SEARCH_KERNEL  # 1.067, faster: never shown
ENVIRONMENT = {
    "gpu_name": "NVIDIA H200",
    "arch": "sm_90",
    "driver": "580.159.04",
    "cuda_runtime": "13.0",
    "cublaslt_version": "130100",
    "cutlass_version": "4.2.0",
}


@pytest.fixture
def campaign(tmp_path, alice) -> tuple[Campaign, Path]:
    (config,) = SearchSpace.library(SHAPE, families=("sm90",)).configs[:1]
    baselines = dict.fromkeys(BASELINES, SEARCH_BASELINE)
    path = tmp_path / "run" / "campaign.sqlite"
    write_campaign(
        path,
        "sessions",
        {
            SHAPE: [
                CandidateRecord(
                    name=config.name,
                    family=config.FAMILY,
                    knobs=config.knobs(),
                    proposer="rl",
                    status="ok",
                    reward=0.07,
                    seconds=SEARCH_KERNEL,
                    baselines=baselines,
                    timings={"device": {"seconds": SEARCH_KERNEL, "baselines": baselines}},
                    gpu_seconds=0.5,
                )
            ]
        },
        settings={"name": "sessions", "budget": 1, "mix": {"rl": 1.0}},
        status="budget",
    )
    seconds = {f"{b}_{v}": FINAL_BASELINE for b in BASELINES for v in ("nn", "tn")}
    best = {b: {"seconds": FINAL_BASELINE, "layout": "nn"} for b in BASELINES}
    final = {
        "settings": {"name": "sessions", "budget": 1},
        "problems": [],
        "final": {
            SHAPE.key: {
                "protocols": {
                    "device": {
                        "statistic": "median",
                        "seconds": {**seconds, config.name: FINAL_KERNEL},
                        "best_baselines": best,
                        "speedups": {config.name: dict.fromkeys(BASELINES, SHOWN)},
                        "rejected_while_timed": [],
                    }
                },
                "environment": ENVIRONMENT,
                "sanitize": {config.name: {"ok": True, "reason": "ok"}},
            }
        },
    }
    report_path = path.parent / "campaign.json"
    report_path.write_text(json.dumps(final))
    call_command("import_results", str(path), owner="alice")
    return Campaign.objects.get(name="sessions"), report_path


def shown(text: str) -> None:
    """The text shows the same-session ratio and never the mixed one."""
    assert f"×{SHOWN:.3f}" in text
    assert f"{MIXED:.3f}" not in text


def test_the_sessions_disagree_in_verdict():
    assert SHOWN < 1 < SEARCH
    assert MIXED > 1


def test_the_pages_show_the_final_sessions_ratio(client, campaign):
    row, _ = campaign
    problem = row.problems.get()
    candidate = Candidate.objects.get(problem=problem)
    shown(client.get(reverse("campaign-detail", args=[row.id])).content.decode())
    shown(client.get(reverse("problem-detail", args=[problem.id])).content.decode())
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    shown(page)
    assert f"×{SEARCH:.3f}" in page  # the search session, with its own baselines
    listing = client.get("/").content.decode()
    assert f"×{SHOWN:.3f}" in listing  # the headline's geomean of one shape
    assert f"{MIXED:.3f}" not in listing


def test_the_downloads_and_the_api_give_the_final_sessions_ratio(client, campaign):
    row, _ = campaign
    response = client.get(reverse("campaign-results-csv", args=[row.id]))
    (line,) = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
    assert float(line["speedup_cublaslt_autotune"]) == pytest.approx(SHOWN)
    assert (line["session"], line["verdict_cublaslt_autotune"]) == ("final", "slower")
    assert float(line["session_kernel_s"]) == pytest.approx(FINAL_KERNEL)
    document = json.loads(client.get(reverse("campaign-results-json", args=[row.id])).content)
    (candidate,) = document["candidates"]
    assert candidate["speedup_torch"] == pytest.approx(SHOWN)
    assert document["shapes"][0]["best"]["ratios"]["torch"]["value"] == pytest.approx(SHOWN)
    (line,) = document["headline"]["baselines"][:1]
    assert (line["geomean"], line["slower"]) == (pytest.approx(SHOWN), 1)
    api = client.get(reverse("api-campaign-speedups", args=[row.id])).json()
    assert api["shapes"][0]["speedups"]["cublaslt_autotune"] == pytest.approx(SHOWN)
    assert api["shapes"][0]["verdicts"]["cublaslt_autotune"] == "slower"
    heat = client.get(reverse("api-campaign-heatmap", args=[row.id])).json()
    assert heat["cells"][0]["speedup"] == pytest.approx(SHOWN)
    progress = client.get(reverse("api-campaign-progress", args=[row.id])).json()
    assert progress["problems"][0]["speedups"]["torch"] == pytest.approx(SHOWN)


def test_the_bundle_leaves_out_a_kernel_only_the_mixed_ratio_calls_faster(client, campaign):
    row, _ = campaign
    response = client.get(reverse("campaign-bundle", args=[row.id]))
    data = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    manifest = json.loads(data.read("gemmforge-sessions/gemmforge_bundle/kernels.json"))
    assert manifest["kernels"] == []
    readme = data.read("gemmforge-sessions/README.md").decode()
    assert f"| torch.matmul | {SHOWN:.3f} | 0 | 0 | 1 |" in readme


def test_engine_report_gives_the_same_ratio(campaign):
    _, report_path = campaign
    (result,) = engine_report.load_results([report_path]).values()
    assert result.points["device"].speedups()["torch"] == pytest.approx(SHOWN)


def test_a_final_that_kept_quartiles_shows_a_ratio_inside_them_as_a_tie(client, campaign):
    """×0.960 with ±5 % interquartile ranges on both times is within the noise: tied on every
    surface, and in engine report's headline."""
    row, report_path = campaign
    report = json.loads(report_path.read_text())
    device = report["final"][SHAPE.key]["protocols"]["device"]
    device["quartiles"] = {
        name: {"p25": t * 0.95, "p75": t * 1.05} for name, t in device["seconds"].items()
    }
    report_path.write_text(json.dumps(report))
    call_command("import_results", str(report_path.parent / "campaign.sqlite"), owner="alice")
    problem = row.problems.get()
    ratio = problem.best["ratios"]["cublaslt_autotune"]
    assert (ratio["verdict"], ratio["value"]) == ("tied", pytest.approx(SHOWN))
    assert ratio["low"] < 1 < ratio["high"]
    api = client.get(reverse("api-campaign-speedups", args=[row.id])).json()
    assert api["shapes"][0]["verdicts"]["cublaslt_autotune"] == "tied"
    page = client.get(reverse("campaign-detail", args=[row.id])).content.decode()
    assert f"×{SHOWN:.3f} ≈" in page
    expected = engine_report.report_headline(
        engine_report.load_results([report_path]), gpu=engine_report.gpu_name([report_path])
    )
    assert expected.summary("cublaslt_autotune").counts["tied"] == 1
