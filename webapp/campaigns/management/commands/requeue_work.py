"""manage.py requeue_work: run the periodic work job once (what Celery beat runs every
WORK_REQUEUE_SECONDS): start queued campaigns, re-queue expired leases, fail items past the cap."""

from django.core.management.base import BaseCommand

from webapp.campaigns.work import work_requeue


class Command(BaseCommand):
    help = "Start queued campaigns, re-queue expired work leases, fail items past the attempt cap."

    def handle(self, *args, **options):
        counts = work_requeue()
        self.stdout.write(", ".join(f"{name} {count}" for name, count in counts.items()))
