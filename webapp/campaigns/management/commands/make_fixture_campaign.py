"""Build a large synthetic-for-load-testing campaign by resampling a recorded run."""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from webapp.campaigns.imports import campaign_import_report
from webapp.campaigns.management.commands.import_results import default_name, owner_named
from webapp.campaigns.synthetic import campaign_make_synthetic

RECORDED_RUN = Path("bench/results/2026-12-02-h200-families/families-run1.json")


class Command(BaseCommand):
    help = (
        "Import the recorded H200 families run, then make a campaign of N candidates resampled"
        " from its measurements (named as synthetic, for load testing)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--candidates", type=int, default=10000)
        parser.add_argument("--from", dest="source", type=Path, default=None)
        parser.add_argument("--owner", default="admin")
        parser.add_argument("--seed", type=int, default=2026)

    def handle(self, *args, candidates: int, source: Path | None, owner: str, seed: int, **options):
        if candidates < 1:
            raise CommandError("--candidates must be at least 1")
        path = source or Path(settings.BASE_DIR) / RECORDED_RUN
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        user = owner_named(owner)
        recorded = campaign_import_report(
            report=report,
            owner=user,
            name=default_name(path),
            source_label=f"{path.parent.name}/{path.name}",
        ).campaign
        campaign = campaign_make_synthetic(
            source=recorded, owner=user, candidates=candidates, seed=seed
        )
        self.stdout.write(f"campaign {campaign.id} {campaign.name!r}")
