"""Build a large synthetic-for-load-testing campaign by resampling a recorded run."""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from webapp.campaigns.database_imports import campaign_import_database
from webapp.campaigns.imports import campaign_import_report
from webapp.campaigns.launch import preset_shapes
from webapp.campaigns.management.commands.import_results import default_name, owner_named
from webapp.campaigns.synthetic import campaign_make_synthetic, campaign_make_synthetic_grid

RECORDED_RUN = Path("bench/results/2026-12-02-h200-families/families-run1.json")
RECORDED_GRID = Path("bench/results/grid64/campaign.sqlite")
RECORDED_GRID_CAMPAIGN = "nn-64shapes-2bacba6c"


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
        parser.add_argument(
            "--grid",
            choices=["cuda-l2"],
            help="a campaign over this preset's shapes (CUDA-L2: 1000), each drawing "
            "--per-shape candidates from the nearest shape of the recorded grid64 campaign",
        )
        parser.add_argument("--per-shape", type=int, default=10)

    def handle(self, *args, candidates: int, source: Path | None, owner: str, seed: int, **options):
        if options.get("grid"):
            return self.grid(options["grid"], options["per_shape"], owner, seed)
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

    def grid(self, preset: str, per_shape: int, owner: str, seed: int) -> None:
        user = owner_named(owner)
        path = Path(settings.BASE_DIR) / RECORDED_GRID
        summaries = campaign_import_database(path=path, owner=user, campaign=RECORDED_GRID_CAMPAIGN)
        campaign = campaign_make_synthetic_grid(
            source=summaries[0].campaign,
            owner=user,
            shapes=preset_shapes(preset, []),
            per_shape=per_shape,
            seed=seed,
        )
        self.stdout.write(f"campaign {campaign.id} {campaign.name!r}")
