"""A run that kept no quartiles: its ratios are judged with the spread measured for its protocol
on its GPU, or, where none was measured, have no verdict and the pages say so plainly."""

from __future__ import annotations

import pytest
from django.urls import reverse

from webapp.campaigns.models import Candidate
from webapp.campaigns.ratios import problem_refresh_best
from webapp.workers.models import GpuEnvironment

pytestmark = pytest.mark.django_db


def environment(name: str) -> GpuEnvironment:
    return GpuEnvironment.objects.create(
        name=name, arch="sm_90", driver_version="580", cuda_version="13.0",
        cublas_version="13.1", cutlass_version="4.2",
    )  # fmt: skip


def timed(problem, baseline_s: float, environment_id: int | None) -> Candidate:
    entry = {"median_s": 1.0e-4, "baselines": {"cublaslt_autotune": baseline_s}, "session": "sweep"}
    if environment_id is not None:
        entry["gpu_environment"] = environment_id
    candidate = Candidate.objects.create(
        problem=problem, name="k", family="sm90", source="", source_hash="c" * 64,
        proposer="sweep", status=Candidate.Status.DONE, timings={"device": entry},
    )  # fmt: skip
    problem_refresh_best(problem=problem)
    problem.refresh_from_db()
    return candidate


def test_on_a_gpu_whose_spread_was_measured_a_ratio_inside_it_is_a_tie(client, queued_campaign):
    problem = queued_campaign.problems.get(m=16)
    timed(problem, 1.002e-4, environment("NVIDIA H200").id)
    ratio = problem.best["ratios"]["cublaslt_autotune"]
    assert (ratio["verdict"], ratio["value"]) == ("tied", pytest.approx(1.002))
    assert "spread 2%" in ratio["noise"]
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "×1.002 ≈" in page
    assert 'id="no-noise"' not in page


def test_where_no_noise_was_measured_a_ratio_has_no_verdict_and_the_page_says_so(
    client, queued_campaign
):
    problem = queued_campaign.problems.get(m=16)
    candidate = timed(problem, 1.0001e-4, environment("NVIDIA H100 80GB HBM3").id)
    ratio = problem.best["ratios"]["cublaslt_autotune"]
    assert (ratio["verdict"], ratio["noise"]) == ("unmeasured", "no noise measured")
    progress = client.get(reverse("api-campaign-progress", args=[queued_campaign.id])).json()
    (autotune,) = progress["headline"]["baselines"]
    assert (autotune["faster"], autotune["unmeasured"]) == (0, 1)  # ×1.0001 is not "faster"
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "No noise was measured for some ratios" in page
    assert "1 with no noise measured" in page
    assert "×1.000 ?" in page
    candidate_page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert "no noise measured for this session" in candidate_page
    csv_text = b"".join(
        client.get(reverse("campaign-results-csv", args=[queued_campaign.id])).streaming_content
    ).decode()
    assert ",unmeasured" in csv_text
