"""Writes for campaigns."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from engine.problem import Problem as EngineProblem
from webapp.campaigns.models import Campaign, Layout, Problem


@transaction.atomic
def campaign_create(
    *, owner: AbstractBaseUser, name: str, layout: str, problems: Sequence[EngineProblem]
) -> Campaign:
    """A queued campaign with one queued Problem per distinct shape.

    Nothing runs it yet: the campaign runner (a later piece) claims queued campaigns.
    """
    campaign = Campaign.objects.create(
        owner=owner, name=name, layout=Layout(layout), status=Campaign.Status.QUEUED
    )
    distinct = dict.fromkeys(problems)
    Problem.objects.bulk_create(
        Problem(campaign=campaign, m=p.m, n=p.n, k=p.k, layout=p.layout.value) for p in distinct
    )
    return campaign
