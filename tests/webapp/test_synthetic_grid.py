"""The 1000-shape synthetic campaign (the CUDA-L2 preset) the screenshots show."""

import io

import pytest
from django.core.management import call_command

from webapp.campaigns.models import Campaign, Candidate
from webapp.campaigns.synthetic import SYNTHETIC_PREFIX

pytestmark = pytest.mark.django_db


@pytest.mark.slow
def test_the_cuda_l2_grid_campaign_keeps_each_recorded_ratio(alice):
    call_command(
        "make_fixture_campaign", grid="cuda-l2", per_shape=2, owner="alice", stdout=io.StringIO()
    )
    campaign = Campaign.objects.get(name__startswith=SYNTHETIC_PREFIX)
    assert "1000 shapes" in campaign.name
    assert campaign.problems.count() == 1000
    assert Candidate.objects.filter(problem__campaign=campaign).count() == 2000
    copy = Candidate.objects.filter(problem__campaign=campaign, speedup__isnull=False).first()
    original = Candidate.objects.get(id=copy.outcome["resampled_from"])
    assert copy.speedup == pytest.approx(original.speedup)  # times scaled, ratios kept
    timed = campaign.problems.exclude(best={}).count()
    assert timed > 900
