from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from engine.problem import Problem as EngineProblem
from webapp.campaigns.models import Campaign
from webapp.campaigns.services import campaign_create


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user(username="alice", password="wonderland-42")


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def queued_campaign(alice) -> Campaign:
    return campaign_create(
        owner=alice,
        name="llama mlp",
        layout="tn",
        problems=[
            EngineProblem.parse("4096x11008x4096", "tn"),
            EngineProblem.parse("16x4096x4096", "tn"),
        ],
    )


RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"


@pytest.fixture
def bob(db):
    return get_user_model().objects.create_user(username="bob", password="builder-42")


@pytest.fixture
def recorded_campaign(alice) -> Campaign:
    """The recorded H200 families sweep (bench/results/2026-12-02-h200-families), imported and owned
    by alice."""
    from django.conf import settings
    from django.core.management import call_command

    call_command("import_results", str(settings.BASE_DIR / RECORDED_RUN), owner="alice")
    return Campaign.objects.get(owner=alice)


@pytest.fixture(autouse=True)
def _empty_cache():
    """Rate-limit counters (webapp/ratelimit.py) start at zero in every test."""
    from django.core.cache import cache

    from webapp import ratelimit

    cache.clear()
    ratelimit.reset_fallback()
    yield
    cache.clear()
    ratelimit.reset_fallback()
