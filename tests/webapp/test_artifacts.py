"""The candidate page's compile report and the downloads: a shape's best kernel, the bundle."""

import io
import json
import zipfile

import pytest
from django.urls import reverse

from webapp.campaigns import artifacts
from webapp.campaigns.models import Candidate, Problem
from webapp.campaigns.ratios import problem_refresh_best

pytestmark = pytest.mark.django_db

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6kernelv' for 'sm_90a'
ptxas info    : Function properties for _Z6kernelv
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""


def some_candidate(campaign, **fields):
    problem = campaign.problems.first()
    return Candidate.objects.create(
        problem=problem,
        name=fields.pop("name", "k1"),
        family="sm90",
        source="__global__ void kernel() {}",
        source_hash=fields.pop("source_hash", "a" * 64),
        proposer="random",
        **fields,
    )


# -- compile report ----------------------------------------------------------------------------
def test_the_report_parses_the_log_when_the_record_has_no_resources():
    report = artifacts.compile_report({"ok": True, "seconds": 3.5, "log": PTXAS_LOG})
    assert report["resources_from"] == "log"
    [kernel] = report["kernels"]
    assert kernel["name"] == "_Z6kernelv"
    assert kernel["arch"] == "sm_90a"
    assert (kernel["registers"], kernel["shared_bytes"], kernel["stack_bytes"]) == (168, 1024, 16)
    assert (kernel["spill_stores_bytes"], kernel["spill_loads_bytes"]) == (8, 4)
    assert kernel["spills"] is True


def test_the_report_prefers_recorded_resources():
    recorded = {
        "name": "_Z1kv",
        "arch": "sm_80",
        "registers": 96,
        "shared_bytes": 0,
        "stack_bytes": 0,
        "spill_stores_bytes": 0,
        "spill_loads_bytes": 0,
    }
    report = artifacts.compile_report({"log": PTXAS_LOG, "resources": [recorded]})
    assert report["resources_from"] == "record"
    assert [k["registers"] for k in report["kernels"]] == [96]


def test_nothing_recorded_gives_no_report():
    assert artifacts.compile_report(None) is None
    assert artifacts.compile_report({}) is None
    assert artifacts.compile_report({"ok": True})["kernels"] == []


def test_the_candidate_page_shows_the_ptxas_table_and_the_log(client, queued_campaign):
    candidate = some_candidate(
        queued_campaign, compile_result={"ok": True, "seconds": 2.0, "log": PTXAS_LOG}
    )
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert 'id="ptxas"' in page
    assert '<td class="num">168</td>' in page
    assert "1024 B" in page
    assert 'id="compile-log"' in page
    assert "Parsed from the compile log" in page
    assert '"log"' not in page  # no raw JSON


def test_the_candidate_page_says_not_recorded(client, queued_campaign):
    candidate = some_candidate(queued_campaign)
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert "Compile record: not recorded." in page
    other = some_candidate(
        queued_campaign, name="k2", source_hash="b" * 64, compile_result={"ok": True}
    )
    page = client.get(reverse("candidate-detail", args=[other.id])).content.decode()
    assert "ptxas report: not recorded." in page
    assert "Compile log: not recorded." in page


def test_an_imported_record_shows_its_recorded_registers(client, recorded_campaign):
    candidate = Candidate.objects.filter(problem__campaign=recorded_campaign).first()
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert "registers (recorded)" in page
    assert "ptxas report: not recorded." in page


# -- a shape's best kernel ---------------------------------------------------------------------
def test_the_best_kernel_downloads_as_cu_rendered_from_its_config(client, recorded_campaign):
    problem = recorded_campaign.problems.get(m=4096, n=4096, k=4096, layout="nn")
    best = artifacts.best_verified(problem=problem)
    assert best.source == ""  # imported: rendered from the family config
    response = client.get(reverse("problem-best-kernel", args=[problem.id]))
    assert response.status_code == 200
    disposition = response["Content-Disposition"]
    assert disposition.startswith("attachment; filename=")
    assert f"gemmforge-shape-{problem.id}-4096x4096x4096-nn-" in disposition
    assert disposition.endswith('.cu"')
    source = response.content.decode()
    assert "__global__" in source or "cutlass" in source
    page = client.get(reverse("problem-detail", args=[problem.id])).content.decode()
    assert reverse("problem-best-kernel", args=[problem.id]) in page


TIMED = {"device": {"median_s": 1.0e-4, "baselines": {"cublaslt_autotune": 1.1e-4}}}


def test_a_stored_source_is_served_as_is(client, queued_campaign):
    candidate = some_candidate(
        queued_campaign, status=Candidate.Status.DONE, reward=0.1, timings=TIMED
    )
    problem_refresh_best(problem=candidate.problem)
    response = client.get(reverse("problem-best-kernel", args=[candidate.problem_id]))
    assert response.content.decode() == candidate.source


def test_a_verified_kernel_never_timed_beside_a_baseline_is_no_best_kernel(client, queued_campaign):
    candidate = some_candidate(
        queued_campaign,
        status=Candidate.Status.DONE,
        reward=0.1,
        timings={"device": {"median_s": 1.0e-4}},  # no baseline in its session
    )
    problem_refresh_best(problem=candidate.problem)
    assert (
        client.get(reverse("problem-best-kernel", args=[candidate.problem_id])).status_code == 404
    )
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    assert "none timed yet" in page


def test_a_shape_without_a_verified_kernel_is_404(client, queued_campaign):
    problem = queued_campaign.problems.first()
    some_candidate(queued_campaign, status=Candidate.Status.REJECTED)
    assert client.get(reverse("problem-best-kernel", args=[problem.id])).status_code == 404
    assert client.get(reverse("problem-best-kernel", args=[999999])).status_code == 404


# -- the kernel bundle -------------------------------------------------------------------------
def bundle(client, campaign, query=""):
    response = client.get(reverse("campaign-bundle", args=[campaign.id]) + query)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    data = b"".join(response.streaming_content)
    return response, zipfile.ZipFile(io.BytesIO(data))


def member(zf: zipfile.ZipFile, name: str) -> str:
    """The zip's ``<top folder>/<name>`` (every bundle has one top folder)."""
    [top] = {n.split("/", 1)[0] for n in zf.namelist()}
    return f"{top}/{name}"


def manifest_kernels(zf: zipfile.ZipFile) -> list[dict]:
    return json.loads(zf.read(member(zf, "gemmforge_bundle/kernels.json")))["kernels"]


def sanitize_all(campaign) -> None:
    """A passing compute-sanitizer verdict on every verified candidate, as imported finals
    leave it (webapp.campaigns.finals.candidates_apply_final_verdicts)."""
    for candidate in Candidate.objects.filter(
        problem__campaign=campaign, status=Candidate.Status.DONE
    ):
        candidate.verification_result = {
            **(candidate.verification_result or {}),
            "sanitize": {"ok": True, "reason": "ok"},
        }
        candidate.save(update_fields=["verification_result"])


def test_the_bundle_holds_only_kernels_faster_than_torch_by_default(client, recorded_campaign):
    sanitize_all(recorded_campaign)
    # in the recorded H200 run no kernel beats torch.matmul: an empty dispatch table
    response, zf = bundle(client, recorded_campaign)
    name = f"gemmforge-campaign-{recorded_campaign.id}-"
    assert name in response["Content-Disposition"]
    assert "-bundle.zip" in response["Content-Disposition"]
    assert manifest_kernels(zf) == []
    assert "fall back to" in zf.read(member(zf, "README.md")).decode()
    # make one shape's best kernel twice as fast: it alone is bundled
    problem = recorded_campaign.problems.get(m=4096, n=4096, k=4096, layout="nn")
    best = artifacts.best_verified(problem=problem)
    for timing in best.timings.values():
        timing["median_s"] /= 2
    best.save()
    problem_refresh_best(problem=problem)
    _, zf = bundle(client, recorded_campaign)
    [kernel] = manifest_kernels(zf)
    assert (kernel["m"], kernel["layout"]) == (4096, "nn")
    assert kernel["speedups"]["torch"] > 1
    assert member(zf, f"gemmforge_bundle/kernels/{kernel['name']}.cu") in zf.namelist()
    assert json.loads(zf.read(member(zf, "results.json")))["environment"]["gpu_name"]


def test_the_slower_variant_bundles_every_shapes_best(client, recorded_campaign):
    sanitize_all(recorded_campaign)
    response, zf = bundle(client, recorded_campaign, "?slower=1")
    assert "-bundle-all.zip" in response["Content-Disposition"]
    kernels = manifest_kernels(zf)
    assert len(kernels) == Problem.objects.filter(campaign=recorded_campaign).count()


def test_without_sanitizer_verdicts_nothing_is_bundled_and_the_readme_says_why(
    client, recorded_campaign
):
    _, zf = bundle(client, recorded_campaign, "?slower=1")
    assert manifest_kernels(zf) == []
    readme = zf.read(member(zf, "README.md")).decode()
    assert "no passing compute-sanitizer verdict" in readme
    assert (
        readme.count("no passing compute-sanitizer verdict") == recorded_campaign.problems.count()
    )


def test_the_campaign_page_offers_both_bundles_and_explains_the_fallback(client, recorded_campaign):
    page = client.get(reverse("campaign-detail", args=[recorded_campaign.id])).content.decode()
    url = reverse("campaign-bundle", args=[recorded_campaign.id])
    assert f'href="{url}"' in page
    assert f'href="{url}?slower=1"' in page
    assert "fall back to torch.matmul" in page
    assert "passed compute-sanitizer" in page


def test_a_campaign_with_no_data_offers_no_bundle_and_says_why(client, queued_campaign):
    page = client.get(reverse("campaign-detail", args=[queued_campaign.id])).content.decode()
    url = reverse("campaign-bundle", args=[queued_campaign.id])
    assert f'href="{url}"' not in page
    assert f"No kernel bundle: {artifacts.NO_BUNDLE}" in page
    response = client.get(url)
    assert response.status_code == 404
