"""Import a recorded family-sweep report (bench/results/...json) as a campaign."""

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.campaigns.imports import ReportError, campaign_import_report


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
    help = "Import a family-sweep report as a campaign (re-importing updates it in place)."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--owner", default="admin", help="Username; created if missing.")
        parser.add_argument("--name", help="Campaign name (default: from the file's path).")

    def handle(self, *args, file: Path, owner: str, name: str | None, **options):
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
