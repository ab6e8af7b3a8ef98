"""A campaign's search space: full (every valid config) or the curated library, chosen at launch;
and the local GPU step's tuning reaches its child process."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from django.urls import reverse

from engine.codegen.library import library
from engine.problem import Layout
from engine.problem import Problem as EngineProblem
from engine.propose.space import families_for_arch
from webapp.campaigns import runner
from webapp.campaigns.forms import CampaignForm
from webapp.campaigns.models import Campaign
from webapp.campaigns.services import campaign_create

LAUNCH = {
    "name": "space",
    "shapes": "4096x4096x4096",
    "layout": "nn",
    "budget_per_shape": "8",
    "proposer_mix": "evolve=1",
    "reward_protocol": "device",
    "launch_without_worker": "on",  # no GPU worker runs in these tests
}
RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"


def test_the_form_defaults_to_the_library_space():
    form = CampaignForm(data=LAUNCH)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["search_space"] == "library"


def test_an_unknown_space_is_rejected():
    form = CampaignForm(data={**LAUNCH, "search_space": "everything"})
    assert not form.is_valid()
    assert "search_space" in form.errors


@pytest.mark.django_db
def test_launching_stores_the_space_and_the_campaign_page_shows_it(alice_client):
    response = alice_client.post("/campaigns/new/", {**LAUNCH, "search_space": "library"})
    assert response.status_code == 302
    campaign = Campaign.objects.get()
    assert campaign.search_space == Campaign.SearchSpace.LIBRARY
    page = alice_client.get(reverse("campaign-detail", args=[campaign.id])).content.decode()
    assert "search space <code>library</code>" in page


def make(owner, space: str) -> Campaign:
    return campaign_create(
        owner=owner,
        name="spaced",
        layout="nn",
        problems=[EngineProblem.parse("4096x4096x4096", "nn")],
        search_space=space,
    )


@pytest.mark.django_db
@pytest.mark.slow
def test_the_local_executor_searches_the_library_when_the_campaign_asks(alice, settings):
    settings.GEMMFORGE_EXECUTOR = "local"
    problem = make(alice, "library").problems.get()
    space = runner.search_space(problem, Campaign.SearchSpace.LIBRARY)
    families = families_for_arch(problem.arch)
    curated = {c.name for f in families for c in library(f, Layout.NN)}
    assert 0 < len(space) <= len(curated)
    assert set(space.by_name) <= curated
    assert len(runner.search_space(problem, Campaign.SearchSpace.FULL)) > len(space)


@pytest.mark.django_db
def test_a_compile_worker_builds_a_problems_space_once_for_all_its_steps(alice, settings):
    settings.GEMMFORGE_EXECUTOR = "local"
    problem = make(alice, "full").problems.get()
    first = runner.search_space(problem, Campaign.SearchSpace.FULL)
    assert runner.search_space(problem, Campaign.SearchSpace.FULL) is first
    assert runner.search_space(problem, Campaign.SearchSpace.LIBRARY) is not first
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"  # another executor: another space
    assert runner.search_space(problem, Campaign.SearchSpace.FULL) is not first


@pytest.mark.django_db
def test_the_replay_executor_keeps_the_recorded_configs(alice, settings):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    problem = make(alice, "library").problems.get()
    table = runner.replay_table(runner.executor_spec())
    space = runner.search_space(problem, Campaign.SearchSpace.LIBRARY)
    assert set(space.by_name) == {c.name for c in table.configs_for(problem.as_engine())}


def test_the_local_gpu_step_gets_its_verify_jobs_and_timing_cap(settings, tmp_path):
    settings.GEMMFORGE_EXECUTOR = "local"
    settings.GEMMFORGE_VERIFY_JOBS = 6
    settings.GEMMFORGE_DEVICE_SECONDS = 4
    seen: list[list[str]] = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        out = argv[argv.index("--out") + 1]
        with open(out, "w") as f:
            f.write("[]")
        return mock.Mock(timed_out=False, ok=True, returncode=0, stderr="")

    row = mock.Mock(family="sm90", config={}, id=1)
    row.name = "k"
    with mock.patch.object(runner.processes, "run", fake_run):
        assert runner.run_gpu_child("4096x4096x4096_nn", [row]) == []
    [argv] = seen
    assert argv[argv.index("--verify-jobs") + 1] == "6"
    assert argv[argv.index("--device-seconds") + 1] == "4"
    # created by the step once its verdicts are in: the next step's standby child watches it
    assert Path(argv[argv.index("--verified-mark") + 1]).name == runner.VERIFIED_MARK
