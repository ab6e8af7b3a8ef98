"""Reads for campaigns."""

from __future__ import annotations

from django.db.models import Count, F, QuerySet

from webapp.campaigns.models import Campaign, Candidate, Problem


def campaign_list() -> QuerySet[Campaign]:
    """Newest first, with a problem count."""
    return (
        Campaign.objects.select_related("owner")
        .annotate(problem_count=Count("problems"))
        .order_by("-created", "-id")
    )


def candidates_best_first(*, problem: Problem) -> QuerySet[Candidate]:
    """Highest reward first, unrewarded last (candidate_reward_idx covers problem, -reward)."""
    return problem.candidates.order_by(F("reward").desc(nulls_last=True), "id")
