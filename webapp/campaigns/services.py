"""Writes for campaigns."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from engine.problem import Problem as EngineProblem
from webapp.campaigns.models import Campaign, Layout, Problem


@transaction.atomic
def campaign_create(
    *,
    owner: AbstractBaseUser,
    name: str,
    layout: str,
    problems: Sequence[EngineProblem],
    budget_per_shape: int = 256,
    proposer_mix: dict[str, float] | None = None,
    reward_protocol: str = "device",
    gpu_pool: str = "",
    search_space: str = Campaign.SearchSpace.LIBRARY,
    seed: int | None = None,
    final_top: int = 2,
    final_device_seconds: float = 20.0,
) -> Campaign:
    """A queued campaign with one queued Problem per distinct shape.

    Nothing runs it yet: the campaign runner (a later piece) claims queued campaigns.
    """
    campaign = Campaign.objects.create(
        owner=owner,
        name=name,
        layout=Layout(layout),
        status=Campaign.Status.QUEUED,
        budget_per_shape=budget_per_shape,
        proposer_mix=proposer_mix or {},
        reward_protocol=reward_protocol,
        gpu_pool=gpu_pool,
        search_space=Campaign.SearchSpace(search_space),
        final_top=final_top,
        final_device_seconds=final_device_seconds,
        **({} if seed is None else {"seed": seed}),
    )
    distinct = dict.fromkeys(problems)
    Problem.objects.bulk_create(
        Problem(campaign=campaign, m=p.m, n=p.n, k=p.k, layout=p.layout.value) for p in distinct
    )
    return campaign


class CampaignControlError(Exception):
    """The campaign is not in a state that allows this action (e.g. resuming a running one)."""


# action → (states it applies to, state it moves to); resuming re-queues for the runner
CONTROL_TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "pause": ((Campaign.Status.QUEUED, Campaign.Status.RUNNING), Campaign.Status.PAUSED),
    "resume": ((Campaign.Status.PAUSED,), Campaign.Status.QUEUED),
    "cancel": (
        (Campaign.Status.QUEUED, Campaign.Status.RUNNING, Campaign.Status.PAUSED),
        Campaign.Status.CANCELLED,
    ),
}


@transaction.atomic
def campaign_control(*, campaign_id: int, action: str) -> str:
    """Pause, resume or cancel with one conditional UPDATE; returns the new status. Cancelling
    also marks its unfinished shapes cancelled (their running steps stop on their next lease
    check, webapp.campaigns.work).

    Raises CampaignControlError when the campaign's current state does not allow ``action``.
    """
    if action not in CONTROL_TRANSITIONS:
        raise CampaignControlError(f"unknown action {action!r}")
    allowed, target = CONTROL_TRANSITIONS[action]
    changed = Campaign.objects.filter(id=campaign_id, status__in=allowed).update(status=target)
    if changed != 1:
        current = Campaign.objects.filter(id=campaign_id).values_list("status", flat=True).first()
        raise CampaignControlError(f"cannot {action} a campaign that is {current}")
    if target == Campaign.Status.CANCELLED:
        Problem.objects.filter(
            campaign_id=campaign_id, status__in=(Problem.Status.QUEUED, Problem.Status.RUNNING)
        ).update(status=Problem.Status.CANCELLED)
    return target
