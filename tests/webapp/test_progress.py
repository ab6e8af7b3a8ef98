import pytest
from django.urls import reverse

from webapp.campaigns.models import BaselineResult, Candidate, Problem, WorkItem
from webapp.campaigns.ratios import problem_refresh_best
from webapp.workers.models import GpuEnvironment

pytestmark = pytest.mark.django_db


def test_the_progress_endpoint_counts_shapes_candidates_and_the_headline(client, recorded_campaign):
    data = client.get(reverse("api-campaign-progress", args=[recorded_campaign.id])).json()
    assert (data["status"], data["status_label"]) == ("done", "Done")
    assert (data["shapes"], data["shapes_done"], data["candidates"]) == (16, 16, 334)
    autotune = next(
        b for b in data["headline"]["baselines"] if b["baseline"] == "cublaslt_autotune"
    )
    assert autotune["shapes"] == 16
    assert autotune["faster"] + autotune["tied"] + autotune["slower"] == 16
    first = data["problems"][0]
    assert {"problem", "status", "candidates", "speedups", "verdicts", "waiting"} <= set(first)
    assert first["waiting"] == ""  # a finished campaign waits for nothing
    assert sum(p["candidates"] for p in data["problems"]) == 334


def test_the_progress_of_a_queued_campaign_follows_its_shapes(client, queued_campaign):
    url = reverse("api-campaign-progress", args=[queued_campaign.id])
    data = client.get(url).json()
    assert (data["status"], data["shapes"], data["shapes_done"], data["candidates"]) == (
        "queued",
        2,
        0,
        0,
    )
    assert data["headline"]["baselines"] == []
    problem = Problem.objects.get(campaign=queued_campaign, m=16)
    Candidate.objects.create(
        problem=problem,
        name="k",
        family="sm90",
        source="",
        source_hash="b" * 64,
        proposer="rl",
        status=Candidate.Status.DONE,
        timings={
            "device": {
                "median_s": 1.0e-5,
                "baselines": {"cublas": 1.02e-5, "cublaslt_autotune": 0.98e-5},
            }
        },
    )
    problem_refresh_best(problem=problem)
    Problem.objects.filter(id=problem.id).update(status=Problem.Status.DONE)
    data = client.get(url).json()
    assert data["shapes_done"] == 1
    row = next(p for p in data["problems"] if p["problem"] == problem.id)
    assert row["speedups"]["cublas"] == pytest.approx(1.02)
    # a search step that kept no quartiles, on no GPU whose spread was measured: no verdict
    # (engine.timing.ratios.UNMEASURED), so ×1.02 is not counted as faster
    assert row["verdicts"]["cublas"] == "unmeasured"
    assert row["verdicts"]["cublaslt_autotune"] == "unmeasured"
    assert data["headline"]["baselines"][0]["unmeasured"] == 1


def test_each_shape_says_what_its_next_step_waits_for(client, queued_campaign):
    gpu_shape, compile_shape = queued_campaign.problems.order_by("id")
    WorkItem.objects.create(
        campaign=queued_campaign, problem=gpu_shape, kind="gpu", round=0, queue="gpu.sm90"
    )
    WorkItem.objects.create(
        campaign=queued_campaign,
        problem=compile_shape,
        kind="compile",
        round=1,
        queue="compile",
        status=WorkItem.Status.RUNNING,
        worker="cpu@host",
    )
    data = client.get(reverse("api-campaign-progress", args=[queued_campaign.id])).json()
    waiting = {p["problem"]: p["waiting"] for p in data["problems"]}
    assert waiting[gpu_shape.id] == "round 0: GPU step waits for a worker of gpu.sm90 (none online)"
    assert waiting[compile_shape.id] == "round 1: compile running on cpu@host (nvcc)"
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "waits for a worker of gpu.sm90" in page


def test_a_campaign_that_never_ran_shows_no_gpu_environment(client, queued_campaign):
    """A baseline of its shape measured elsewhere exists; the campaign measured nothing, so no
    environment is shown for it."""
    environment = GpuEnvironment.objects.create(
        name="NVIDIA H200",
        arch="sm_90",
        driver_version="1",
        cuda_version="13.0",
        cublas_version="13.1.0",
        cutlass_version="4.2.0",
    )
    BaselineResult.objects.create(
        m=16,
        n=4096,
        k=4096,
        layout="tn",
        baseline="cublas",
        variant="tn",
        timings={"device": {"median_s": 1e-5}},
        gpu_environment=environment,
    )
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert 'id="environment"' not in page
    assert "NVIDIA H200" not in page
    assert "No data yet" in page


def test_the_campaign_page_polls_the_progress_endpoint(client, queued_campaign):
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert f'data-src="/api/campaigns/{queued_campaign.id}/progress.json"' in page
    assert "js/progress.js" in page
    assert 'data-field="candidates"' in page


def test_an_unknown_campaign_has_no_progress(client, db):
    assert client.get("/api/campaigns/999/progress.json").status_code == 404


def test_the_eta_is_the_shapes_remaining_budget_at_the_measured_gpu_seconds(
    client, queued_campaign
):
    problem = queued_campaign.problems.order_by("id").first()
    for i, gpu_seconds in enumerate((0.5, 1.5)):
        Candidate.objects.create(
            problem=problem,
            name=f"k{i}",
            family="sm90",
            source="",
            source_hash=str(i) * 64,
            proposer="rl",
            status=Candidate.Status.DONE,
            outcome={"gpu_seconds": gpu_seconds},
        )
    data = client.get(reverse("api-campaign-progress", args=[queued_campaign.id])).json()
    row = next(p for p in data["problems"] if p["problem"] == problem.id)
    budget = queued_campaign.budget_per_shape
    assert row["eta_gpu_s"] == pytest.approx((budget - 2) * 1.0)
    other = next(p for p in data["problems"] if p["problem"] != problem.id)
    assert other["eta_gpu_s"] == pytest.approx(budget * 1.0)


def chosen_kernel_named(campaign, name: str) -> None:
    """The campaign's first shape gets a timed kernel ``name``, 1.1x cuBLASLt-autotune, as its
    chosen one."""
    problem = campaign.problems.order_by("id").first()
    Candidate.objects.create(
        problem=problem,
        name=name,
        family="sm90",
        source="",
        source_hash="e" * 64,
        proposer="rl",
        status=Candidate.Status.DONE,
        timings={"device": {"median_s": 1.0e-5, "baselines": {"cublaslt_autotune": 1.1e-5}}},
    )
    problem_refresh_best(problem=problem)


def test_the_leaderboard_escapes_what_the_database_holds(client, queued_campaign):
    chosen_kernel_named(queued_campaign, "<script>alert(1)</script>")
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "×1.100" in page


def test_the_leaderboard_shortens_a_long_kernel_name_to_36_characters(client, queued_campaign):
    name = "sm90_" + "x" * 50 + "_tail"
    chosen_kernel_named(queued_campaign, name)
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert f'<code class="small">{name[:35]}…</code>' in page
    assert "_tail" not in page
