import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.campaigns.synthetic import SYNTHETIC_PREFIX
from webapp.workers.models import GpuEnvironment

pytestmark = pytest.mark.django_db

RUN1 = Path(settings.BASE_DIR) / "bench/results/2026-12-02-h200-families/families-run1.json"


def counts():
    return (
        Campaign.objects.count(),
        Problem.objects.count(),
        Candidate.objects.count(),
        BaselineResult.objects.count(),
        GpuEnvironment.objects.count(),
    )


def test_it_imports_the_recorded_h200_run(alice):
    call_command("import_results", str(RUN1), owner="alice")
    campaign = Campaign.objects.get()
    report = json.loads(RUN1.read_text())
    assert campaign.owner == alice
    assert campaign.status == Campaign.Status.DONE
    assert campaign.problems.count() == len(report["sweep"]) == 16
    assert Candidate.objects.count() == sum(e["candidates"] for e in report["sweep"])
    assert BaselineResult.objects.count() == 16 * 8
    env = GpuEnvironment.objects.get()
    assert (env.name, env.driver_version, env.cublas_version) == (
        "NVIDIA H200",
        "580.159.04",
        "13.1.0",
    )


def test_imported_speedups_are_the_ones_engine_report_gives(alice):
    """Each shape's kernel and ratios as ``engine report`` reads the same file (the baselines by
    engine.timing.baselines.best_of_layouts, the sweep's kernel times in the same process)."""
    from engine.publish import report as engine_report

    call_command("import_results", str(RUN1), owner="alice")
    report = json.loads(RUN1.read_text())
    points = engine_report.load_results([RUN1])
    for entry in report["sweep"]:
        shape, _, layout = entry["problem"].partition("_")
        m, n, k = map(int, shape.split("x"))
        problem = Problem.objects.get(m=m, n=n, k=k, layout=layout)
        device = points[entry["problem"]].points["device"]
        assert problem.best_speedups == pytest.approx(device.speedups())
        assert problem.best["name"] == device.kernel == entry["best"]
        assert problem.best["session"]["name"] == "sweep"


def test_the_reward_is_the_log_speedup_over_autotuned_cublaslt(alice):
    call_command("import_results", str(RUN1), owner="alice")
    problem = Problem.objects.get(m=4096, n=4096, k=4096, layout="nn")
    best = problem.candidates.order_by("-reward").first()
    assert best.reward == pytest.approx(-0.0998, abs=1e-3)  # log(0.905)
    assert best.status == Candidate.Status.DONE
    assert best.timings["device"]["median_s"] > 0
    assert best.verification_result["ok"] is True


def test_reimporting_updates_in_place_without_duplicates(alice):
    call_command("import_results", str(RUN1), owner="alice")
    before = counts()
    Candidate.objects.update(reward=None)
    call_command("import_results", str(RUN1), owner="alice")
    assert counts() == before
    assert not Candidate.objects.filter(reward__isnull=True).exists()


def test_it_creates_the_owner_when_missing(db):
    call_command("import_results", str(RUN1), owner="importer")
    assert Campaign.objects.get().owner.username == "importer"


def test_it_rejects_a_file_that_is_not_a_sweep_report(tmp_path, alice):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(CommandError, match="no 'configs'"):
        call_command("import_results", str(bad), owner="alice")
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_results", str(tmp_path / "missing.json"), owner="alice")


def test_the_fixture_campaign_is_labelled_synthetic_and_copies_measured_times(alice):
    call_command("make_fixture_campaign", candidates=200, owner="alice")
    synthetic = Campaign.objects.get(name__startswith=SYNTHETIC_PREFIX)
    assert "resampled from the recorded run" in synthetic.name
    assert Candidate.objects.filter(problem__campaign=synthetic).count() == 200
    recorded_times = {
        c.timings["device"]["median_s"]
        for c in Candidate.objects.exclude(problem__campaign=synthetic)
    }
    for candidate in Candidate.objects.filter(problem__campaign=synthetic)[:50]:
        assert candidate.timings["device"]["median_s"] in recorded_times
        assert "resampled_from" in candidate.timings["device"]
    call_command("make_fixture_campaign", candidates=200, owner="alice")
    assert Campaign.objects.filter(name__startswith=SYNTHETIC_PREFIX).count() == 1
