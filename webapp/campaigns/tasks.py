"""Campaign tasks: thin (a work item id in, a service call, results in the database).

Each owns its failure through webapp.campaigns.runner.work_item_run (retry up to the attempt cap,
then a failed item with its reason); a re-delivered task whose item is no longer queued is a
no-op. They are sent with transaction.on_commit by webapp.campaigns.work.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.campaigns import runner, work


@shared_task(name="webapp.campaigns.tasks.compile_step", bind=True)
def compile_step(self, item_id: int) -> dict[str, Any]:
    """Propose and compile one round of one problem (queue ``compile``)."""
    hostname = str(self.request.hostname or "")
    return runner.work_item_run(item_id=item_id, hostname=hostname, step=runner.compile_step)


@shared_task(name="webapp.campaigns.tasks.gpu_step", bind=True)
def gpu_step(self, item_id: int) -> dict[str, Any]:
    """Verify and time one round's compiled candidates (queue ``gpu.<arch>``)."""
    hostname = str(self.request.hostname or "")
    return runner.work_item_run(item_id=item_id, hostname=hostname, step=runner.gpu_step)


@shared_task(name="webapp.campaigns.tasks.final_step", bind=True)
def final_step(self, item_id: int) -> dict[str, Any]:
    """Sanitize and re-measure one shape's best kernels once its search stopped (queue
    ``gpu.<arch>``)."""
    hostname = str(self.request.hostname or "")
    return runner.work_item_run(item_id=item_id, hostname=hostname, step=runner.final_step)


@shared_task(name="webapp.campaigns.tasks.work_requeue")
def work_requeue() -> dict[str, int]:
    """Periodic (Celery beat): start queued campaigns, re-queue expired leases, fail items past
    their attempt cap, re-send lost messages."""
    return work.work_requeue()


@shared_task(name="webapp.campaigns.tasks.work_resend")
def work_resend(before: float) -> int:
    """Sent by a worker each time it connects to the broker (webapp.celery.ResendOnConnect):
    re-send the queued items last sent before ``before`` (a Unix time), whose messages a
    restarted broker may have lost. Returns how many were sent."""
    return work.work_resend_queued(before=before)
