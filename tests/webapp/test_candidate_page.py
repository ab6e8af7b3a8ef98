"""The candidate page: host-timed ratios say so and are not coloured as wins; a failure of the
recording harness (out of memory) is not scored like a bad kernel, and a long failure message is
shown once, folded."""

from __future__ import annotations

import pytest
from django.conf import settings

from engine.execution.executor import ReplayTable
from engine.outcomes import CandidateRecord
from webapp.campaigns.failures import is_harness_failure
from webapp.campaigns.models import Candidate
from webapp.campaigns.storage import DjangoStorage

pytestmark = pytest.mark.django_db

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
OOM = (
    "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 139.80 GiB of "
    "which 1.42 GiB is free. "
    + "Process 9131 has 8.84 GiB memory in use. " * 25
    + "Of the allocated memory 120.3 GiB is allocated by PyTorch."
)


@pytest.fixture(scope="module")
def configs():
    return ReplayTable.load([settings.BASE_DIR / RECORDED_RUN])


def record(campaign, configs, index: int, **fields) -> Candidate:
    problem = campaign.problems.get(m=4096)
    config = list(configs.configs.values())[index]
    values = {"name": config.name, "family": config.FAMILY, "knobs": config.knobs(),
              "proposer": "random", "round": 0, **fields}  # fmt: skip
    DjangoStorage(campaign).record(
        campaign.name, problem.as_engine().key, [CandidateRecord(**values)]
    )
    return Candidate.objects.get(problem=problem, name=config.name)


def test_an_out_of_memory_in_the_harness_is_not_scored_and_shown_once_folded(
    client, queued_campaign, configs
):
    oom = record(queued_campaign, configs, 0, status="rejected", reward=-2.0,
                 reason="runtime_error", message=OOM)  # fmt: skip
    assert oom.reward is None  # not the -2.0 a bad kernel gets
    page = client.get(f"/candidates/{oom.id}/").content.decode()
    assert "not scored: the recording harness failed, not the kernel" in page
    assert page.count("120.3 GiB is allocated by PyTorch") == 1  # the message once, not twice
    assert '<details><summary class="warn">CUDA out of memory.' in page
    shape_page = client.get(f"/shapes/{oom.problem_id}/").content.decode()
    assert "harness failure" in shape_page


def test_a_wrong_kernel_keeps_its_penalty(client, queued_campaign, configs):
    wrong = record(queued_campaign, configs, 1, status="rejected", reward=-2.0,
                   reason="wrong", message="max abs error 3.1 at (0, 17)")  # fmt: skip
    assert wrong.reward == -2.0
    page = client.get(f"/candidates/{wrong.id}/").content.decode()
    assert "not scored" not in page
    assert page.count("max abs error 3.1 at (0, 17)") == 1


def test_only_harness_memory_failures_count_as_the_harness():
    assert is_harness_failure(status="rejected", reason="runtime_error", message=OOM)
    assert is_harness_failure(status="failed", reason="", message="CUBLAS_STATUS_ALLOC_FAILED")
    assert not is_harness_failure(status="rejected", reason="gpu_memory", message="out of memory")
    assert not is_harness_failure(status="rejected", reason="wrong", message="wrong values")
    assert not is_harness_failure(status="done", reason="", message="")


def test_host_timed_ratios_say_so_and_are_not_coloured_as_wins(client, queued_campaign):
    problem = queued_campaign.problems.get(m=4096)
    candidate = Candidate.objects.create(
        problem=problem, name="k", family="sm90", source="", source_hash="0" * 64,
        proposer="rl", status=Candidate.Status.DONE,
        timings={
            "device": {
                "median_s": 1.0e-4,
                "p25": 0.99e-4,
                "p75": 1.01e-4,
                "baselines": {"torch": 0.9e-4},
                "baseline_quartiles": {"torch": {"p25": 0.89e-4, "p75": 0.91e-4}},
            },
            "offline": {"median_s": 1.0e-4, "baselines": {"torch": 1.45e-4}},
        },
    )  # fmt: skip
    page = client.get(f"/candidates/{candidate.id}/").content.decode()
    offline = page[page.index("<code>offline</code>") :].split("</tr>")[0]
    assert "host-timed: includes the call overhead" in offline
    assert "×1.450" in offline
    assert 'class="win"' not in offline
    assert 'class="host-timed"' in offline
    device = page[page.index("<code>device</code>") :].split("</tr>")[0]
    assert 'class="loss"' in device  # the device protocol keeps its verdict colours
    assert "vs Inductor" not in page  # no column for a baseline never timed beside it
