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
