"""The launch form's GPU pool: its choices, its validation, and that GPU work goes to it."""

import pytest
from django.urls import reverse

from engine.problem import Problem as EngineProblem
from webapp.campaigns import live, work
from webapp.campaigns.forms import CampaignForm, launch_queue
from webapp.campaigns.models import Campaign, gpu_pools, gpu_queue
from webapp.campaigns.services import campaign_create

LAUNCH = {
    "name": "pool",
    "shapes": "4096x4096x4096",
    "layout": "tn",
    "budget_per_shape": "8",
    "proposer_mix": "rl=1",
    "reward_protocol": "device",
    "launch_without_worker": "on",  # no GPU worker runs in these tests
}


def test_the_pools_are_the_gpu_queues_of_the_celery_config():
    assert gpu_pools() == ["sm90", "sm80"]


def test_the_form_offers_every_pool_and_defaults_to_per_shape():
    field = CampaignForm().fields["gpu_pool"]
    assert [value for value, _ in field.choices] == ["", "sm90", "sm80"]
    form = CampaignForm(data=LAUNCH)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["gpu_pool"] == ""


@pytest.mark.parametrize("bad", ["sm75", "gpu.sm90", "fast", "0", "-1", "sm90; drop", "x" * 500])
def test_an_unknown_pool_is_rejected_with_a_message(bad):
    form = CampaignForm(data={**LAUNCH, "gpu_pool": bad})
    assert not form.is_valid()
    [message] = form.errors["gpu_pool"]
    assert message.startswith("Unknown GPU pool ")
    assert "choose one of sm90, sm80" in message


@pytest.mark.django_db
def test_launching_stores_the_pool_and_the_campaign_page_shows_it(alice_client):
    response = alice_client.post("/campaigns/new/", {**LAUNCH, "gpu_pool": "sm80"})
    assert response.status_code == 302
    campaign = Campaign.objects.get()
    assert campaign.gpu_pool == "sm80"
    page = alice_client.get(reverse("campaign-detail", args=[campaign.id])).content.decode()
    assert "<code>gpu.sm80</code>" in page


@pytest.mark.django_db
def test_the_launch_page_shows_the_error_next_to_the_field(alice_client):
    response = alice_client.post("/campaigns/new/", {**LAUNCH, "gpu_pool": "sm75"})
    assert response.status_code == 200
    assert "Unknown GPU pool sm75" in response.content.decode()
    assert not Campaign.objects.exists()


def make(owner, pool):
    return campaign_create(
        owner=owner,
        name="routed",
        layout="tn",
        problems=[EngineProblem.parse("4096x4096x4096", "tn")],
        gpu_pool=pool,
    )


@pytest.mark.django_db
def test_the_campaigns_pool_wins_over_the_shapes_arch(alice):
    problem = make(alice, "sm80").problems.get()
    assert problem.arch == "sm_90"
    gpu = work.work_item_create(problem=problem, kind="gpu", round=0)
    compile_item = work.work_item_create(problem=problem, kind="compile", round=0)
    assert (gpu.queue, compile_item.queue) == ("gpu.sm80", "compile")


@pytest.mark.django_db
def test_without_a_pool_gpu_work_follows_the_shapes_arch(alice):
    problem = make(alice, "").problems.get()
    problem.arch = "sm_80"
    problem.save()
    assert work.work_item_create(problem=problem, kind="gpu", round=0).queue == "gpu.sm80"


@pytest.mark.parametrize(
    ("pool", "arch", "queue"),
    [("sm80", "sm_90", "gpu.sm80"), ("", "sm_80", "gpu.sm80"), ("", "sm_90", "gpu.sm90")],
)
def test_a_gpu_queue_is_the_pools_when_one_is_given_else_the_archs(pool, arch, queue):
    assert gpu_queue(pool=pool, arch=arch) == queue


@pytest.mark.django_db
@pytest.mark.parametrize(("pool", "queue"), [("sm80", "gpu.sm80"), ("", "gpu.sm90")])
def test_the_launch_the_work_items_and_the_wait_name_one_queue(alice, pool, queue):
    campaign = make(alice, pool)
    item = work.work_item_create(problem=campaign.problems.get(), kind="gpu", round=0)
    assert launch_queue(pool) == item.queue == queue
    assert live.campaign_gpu_queues(campaigns=[campaign]) == {campaign.id: {queue}}
