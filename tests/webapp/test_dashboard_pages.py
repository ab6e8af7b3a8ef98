import csv
import io
import json
import re

import pytest
from django.urls import reverse

from engine.problem import Problem as EngineProblem
from engine.timing.baseline_names import BASELINES
from webapp.campaigns.models import Campaign, Problem
from webapp.campaigns.services import campaign_create

pytestmark = pytest.mark.django_db


def problem_4096(campaign, layout="nn"):
    return campaign.problems.get(m=4096, n=4096, k=4096, layout=layout)


def recorded_headline():
    """What ``engine report`` says of the same recorded run (its device-protocol headline)."""
    from django.conf import settings

    from engine.publish import report

    run = settings.BASE_DIR / "bench/results/2026-12-02-h200-families/families-run1.json"
    return report.report_headline(report.load_results([run]), gpu=report.gpu_name([run]))


def test_the_campaign_list_shows_progress_and_the_headline(client, recorded_campaign):
    response = client.get("/")
    row = response.context["page"].object_list[0]
    assert (row.problem_count, row.problems_done, row.candidate_count) == (16, 16, 334)
    expected = recorded_headline().summary("cublaslt_autotune")
    main = row.headline["main"]
    assert main["geomean"] == pytest.approx(expected.geomean)
    assert (main["faster"], main["tied"], main["slower"]) == (
        expected.counts["faster"],
        expected.counts["tied"],
        expected.counts["slower"],
    )
    assert f"×{expected.geomean:.3f}" in response.content.decode()


def test_the_campaign_page_shows_shapes_environment_and_chart_canvases(client, recorded_campaign):
    page = client.get(reverse("campaign-detail", args=[recorded_campaign.id])).content.decode()
    assert "4096x4096x4096" in page
    assert "NVIDIA H200" in page
    assert "driver 580.159.04" in page
    assert "cuBLAS 13.1.0" in page
    assert "CUTLASS 4.2.0" in page
    assert 'id="speedups-chart"' in page
    assert 'id="heatmap-chart"' in page
    assert "vendor/chartjs/chart.umd.min.js" in page


def test_the_shapes_table_puts_the_shape_and_the_reward_baseline_first(client, recorded_campaign):
    page = client.get(reverse("campaign-detail", args=[recorded_campaign.id])).content.decode()
    head = page[
        page.index('<table id="shapes"') : page.index("</thead>", page.index('id="shapes"'))
    ]
    columns = re.findall(r"<th [^>]*>(?:<span[^>]*></span>)?([^<]+)</th>", head)
    assert columns[:5] == [
        "Shape",
        "vs cuBLASLt (autotuned)",
        "vs torch.matmul",
        "vs cuBLAS",
        "vs cuBLASLt (heuristic)",
    ]
    assert "Inductor" not in head
    assert "TunableOp" not in head
    heatmap = page[page.index('<select name="baseline"') :].split("</select>")[0]
    assert "cuBLAS" in heatmap
    assert "Inductor" not in heatmap  # no heatmap of a baseline never timed
    first_row = page[page.index("<tr data-problem=") :].split("</tr>")[0]
    assert first_row.count('data-baseline="') == 4
    assert '<th scope="row" class="shape-cell">' in first_row  # sticky (site.css)


def test_the_shape_page_sorts_filters_and_paginates(client, recorded_campaign):
    problem = problem_4096(recorded_campaign)
    url = reverse("problem-detail", args=[problem.id])
    by_reward = client.get(url).context["page"].object_list
    assert by_reward[0].name == "hgemm_sm90_256x128x64_c2x1x1_s3_nn_coop_epitma_persistent_rn_sw8"
    by_time = [c.median_s for c in client.get(url + "?sort=time").context["page"].object_list]
    assert by_time == sorted(by_time)
    by_name = [c.name for c in client.get(url + "?sort=name").context["page"].object_list]
    assert by_name == sorted(by_name)
    sm80 = client.get(url + "?family=sm80").context["page"].object_list
    assert sm80
    assert {c.family for c in sm80} == {"sm80"}
    assert not client.get(url + "?status=rejected").context["page"].object_list
    assert client.get(url + "?proposer=uniform-sample&page=99").status_code == 200
    assert client.get(url + "?family=bogus").status_code == 200  # an unknown filter is ignored


def test_the_candidate_page_shows_config_verdict_and_timings(client, recorded_campaign):
    best = problem_4096(recorded_campaign).candidates.order_by("-reward").first()
    page = client.get(reverse("candidate-detail", args=[best.id])).content.decode()
    assert "No source was recorded" in page
    assert "&quot;tile_m&quot;: 256" in page
    assert "all checks passed" in page
    assert "×0.905" in page  # vs cuBLASLt autotuned


def test_the_candidate_page_highlights_a_recorded_source(client, recorded_campaign):
    candidate = problem_4096(recorded_campaign).candidates.first()
    candidate.source = "__global__ void k(half* c) { c[0] = 0; }"
    candidate.save()
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert 'class="source"' in page
    assert "__global__" in page
    assert "No source was recorded" not in page


def test_unknown_ids_are_404(client, db):
    for url in ["/campaigns/9/", "/shapes/9/", "/candidates/9/", "/api/campaigns/9/speedups.json"]:
        assert client.get(url).status_code == 404, url


def test_the_speedups_endpoint_gives_each_shapes_best_per_baseline(client, recorded_campaign):
    data = client.get(reverse("api-campaign-speedups", args=[recorded_campaign.id])).json()
    # the sweep timed the four NVIDIA baselines, not the torch-tuned two: those are left out of
    # the legend, and the reward baseline comes first
    assert [b["key"] for b in data["baselines"]] == [
        "cublaslt_autotune",
        "torch",
        "cublas",
        "cublaslt_heuristic",
    ]
    assert len({b["colour"] for b in data["baselines"]}) == 4
    assert len(data["shapes"]) == 16
    assert set(data["shapes"][0]["speedups"]) == set(BASELINES)  # the engine's list, not a copy
    shape = next(
        s for s in data["shapes"] if s["shape"] == "8192x8192x8192" and s["layout"] == "nn"
    )
    assert shape["speedups"]["cublaslt_autotune"] == pytest.approx(0.921, abs=5e-4)
    assert shape["verdicts"]["cublaslt_autotune"] == "slower"
    assert shape["tflops"] == pytest.approx(2 * 8192**3 / shape["seconds"] / 1e12)


def test_the_heatmap_endpoint_slices_by_k_layout_and_baseline(client, recorded_campaign):
    url = reverse("api-campaign-heatmap", args=[recorded_campaign.id])
    data = client.get(url, {"k": 4096, "layout": "tn", "baseline": "cublas"}).json()
    assert (data["k"], data["layout"], data["baseline"]) == (4096, "tn", "cublas")
    assert data["ks"] == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    problem = problem_4096(recorded_campaign, "tn")
    assert data["cells"] == [
        {
            "problem": problem.id,
            "m": 4096,
            "n": 4096,
            "speedup": pytest.approx(problem.best["ratios"]["cublas"]["value"]),
            "verdict": problem.best["ratios"]["cublas"]["verdict"],
        }
    ]
    assert data["baseline_label"] == "cuBLAS"
    assert client.get(url, {"k": "x"}).status_code == 400
    assert client.get(url, {"baseline": "mkl"}).status_code == 400


def test_a_k_no_shape_has_answers_400_with_the_ks_there_are(client, recorded_campaign):
    url = reverse("api-campaign-heatmap", args=[recorded_campaign.id])
    response = client.get(url, {"k": 7})
    assert response.status_code == 400
    assert response.json()["errors"]["k"] == [
        "no shape has K=7; its Ks: 64, 128, 256, 512, 1024, 2048, 4096, 8192"
    ]


def test_the_heatmap_opens_at_the_k_the_api_answers_for_by_default(client, alice):
    shapes = ["64x64x64", "128x128x4096", "256x256x4096"]
    campaign = campaign_create(
        owner=alice, name="ks", layout="nn", problems=[EngineProblem.parse(s) for s in shapes]
    )
    default = client.get(reverse("api-campaign-heatmap", args=[campaign.id])).json()["k"]
    assert default == 4096  # the K most shapes have, not the first
    page = client.get(reverse("campaign-detail", args=[campaign.id])).content.decode()
    select = page[page.index('<select name="k"') :].split("</select>")[0]
    assert '<option value="4096" selected>' in select


def test_the_history_endpoint_gives_speedups_and_a_best_so_far_curve(client, recorded_campaign):
    problem = problem_4096(recorded_campaign)
    data = client.get(reverse("api-problem-history", args=[problem.id])).json()
    points = data["points"]
    assert len(points) == 24
    speedups = [p["speedup"] for p in points if p["speedup"] is not None]
    assert points[-1]["best"] == pytest.approx(max(speedups))
    assert all(p["speedup"] is None for p in points if p["status"] != "done")
    assert all(p["speedup"] > 0 for p in points if p["speedup"] is not None)  # no penalty reward


def test_the_csv_download_has_a_row_per_candidate_with_speedups(client, recorded_campaign):
    response = client.get(reverse("campaign-results-csv", args=[recorded_campaign.id]))
    assert response["Content-Disposition"] == (
        f'attachment; filename="gemmforge-campaign-{recorded_campaign.id}'
        '-recorded-run-2026-12-02-h200-familiesfamilies-run1-results.csv"'
    )
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 334
    best = next(r for r in rows if r["shape"] == "4096x4096x4096" and r["layout"] == "nn")
    assert best["candidate"] == "hgemm_sm90_256x128x64_c2x1x1_s3_nn_coop_epitma_persistent_rn_sw8"
    assert float(best["speedup_cublaslt_autotune"]) == pytest.approx(0.905, abs=5e-4)
    assert best["protocol"] == "device"


def test_the_json_download_holds_environment_shapes_and_candidates(client, recorded_campaign):
    response = client.get(reverse("campaign-results-json", args=[recorded_campaign.id]))
    assert response["Content-Disposition"].endswith('-results.json"')
    document = json.loads(response.content)
    assert document["environments"][0]["name"] == "NVIDIA H200"
    assert len(document["shapes"]) == 16
    assert len(document["candidates"]) == 334


# Control: anonymous → login, another user → 403, the owner → done


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_control_needs_a_login(client, queued_campaign, action):
    response = client.post(reverse("campaign-control", args=[queued_campaign.id, action]))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    queued_campaign.refresh_from_db()
    assert queued_campaign.status == Campaign.Status.QUEUED


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_only_the_owner_can_control_a_campaign(client, bob, queued_campaign, action):
    client.force_login(bob)
    response = client.post(reverse("campaign-control", args=[queued_campaign.id, action]))
    assert response.status_code == 403
    queued_campaign.refresh_from_db()
    assert queued_campaign.status == Campaign.Status.QUEUED


def test_the_owner_pauses_resumes_and_cancels(alice_client, queued_campaign):
    def act(action):
        alice_client.post(reverse("campaign-control", args=[queued_campaign.id, action]))
        queued_campaign.refresh_from_db()
        return queued_campaign.status

    assert act("pause") == "paused"
    assert act("resume") == "queued"
    assert act("cancel") == "cancelled"
    response = alice_client.post(
        reverse("campaign-control", args=[queued_campaign.id, "resume"]), follow=True
    )
    assert "cannot resume a campaign that is cancelled" in response.content.decode()
    assert queued_campaign.status == "cancelled"


def test_control_is_post_only_and_shown_to_the_owner_only(client, bob, queued_campaign):
    url = reverse("campaign-detail", args=[queued_campaign.id])
    client.force_login(bob)
    assert (
        client.get(reverse("campaign-control", args=[queued_campaign.id, "pause"])).status_code
        == 405
    )
    assert ">Pause</button>" not in client.get(url).content.decode()
    client.force_login(queued_campaign.owner)
    assert ">Pause</button>" in client.get(url).content.decode()


def test_reads_are_open_to_other_users(client, bob, recorded_campaign):
    client.force_login(bob)
    problem = Problem.objects.filter(campaign=recorded_campaign).first()
    for url in [
        "/",
        reverse("campaign-detail", args=[recorded_campaign.id]),
        reverse("problem-detail", args=[problem.id]),
        reverse("candidate-detail", args=[problem.candidates.first().id]),
        reverse("campaign-results-csv", args=[recorded_campaign.id]),
    ]:
        assert client.get(url).status_code == 200, url
