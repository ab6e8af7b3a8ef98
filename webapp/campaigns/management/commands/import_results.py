"""Import recorded results as campaigns: an engine campaign database (``python -m engine optimize
--db X.sqlite``; every campaign in it, or ``--campaign NAME``) or a family-sweep report
(bench/results/...json). Re-importing updates in place."""

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.campaigns.database_imports import (
    CampaignDatabaseError,
    campaign_import_database,
    looks_like_database,
)
from webapp.campaigns.imports import ReportError, campaign_import_report
from webapp.campaigns.models import Campaign


def default_name(path: Path) -> str:
    """e.g. 'Recorded run 2026-12-02-h200-families/families-run1'."""
    return f"Recorded run {path.parent.name}/{path.stem}"


def owner_named(username: str):
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


class Command(BaseCommand):
    help = (
        "Import an engine campaign database (.sqlite: every campaign in it) or a family-sweep "
        "report (.json) as campaigns; re-importing updates them in place."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--owner", default="admin", help="Username; created if missing.")
        parser.add_argument(
            "--name", help="Family-sweep report only: campaign name (default: from the path)."
        )
        parser.add_argument(
            "--campaign",
            help="Campaign database only: import just this engine campaign (default: all).",
        )
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="Import only when the dashboard has no campaign yet (bin/run's first start).",
        )

    def handle(
        self,
        *args,
        file: Path,
        owner: str,
        name: str | None,
        campaign: str | None,
        if_empty: bool,
        **options,
    ):
        if if_empty and Campaign.objects.exists():
            self.stdout.write("the dashboard has campaigns already: nothing imported")
            return
        if looks_like_database(file):
            if name:
                raise CommandError(
                    "--name is for a family-sweep report: engine campaigns keep theirs"
                )
            self.import_database(file, owner=owner, campaign=campaign)
        else:
            if campaign:
                raise CommandError("--campaign is for an engine campaign database (.sqlite)")
            self.import_report(file, owner=owner, name=name)

    def import_database(self, file: Path, *, owner: str, campaign: str | None) -> None:
        try:
            summaries = campaign_import_database(
                path=file, owner=owner_named(owner), campaign=campaign
            )
        except CampaignDatabaseError as exc:
            raise CommandError(f"{file}: {exc}") from exc
        for s in summaries:
            self.stdout.write(
                f"campaign {s.campaign.id} {s.campaign.name!r}: {s.problems} shapes,"
                f" {s.candidates} candidates ({s.added} new), {s.baselines} baseline timings"
            )

    def import_report(self, file: Path, *, owner: str, name: str | None) -> None:
        try:
            report = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        try:
            summary = campaign_import_report(
                report=report,
                owner=owner_named(owner),
                name=name or default_name(file),
                source_label=f"{file.parent.name}/{file.name}",
            )
        except ReportError as exc:
            raise CommandError(f"{file}: {exc}") from exc
        self.stdout.write(
            f"campaign {summary.campaign.id} {summary.campaign.name!r}: {summary.problems} shapes,"
            f" {summary.candidates} candidates, {summary.baselines} baseline timings"
        )
