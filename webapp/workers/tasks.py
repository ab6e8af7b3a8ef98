"""Tasks about the workers themselves."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone


@shared_task(name="webapp.workers.tasks.ping", bind=True, ignore_result=False)
def ping(self, payload: str = "ping") -> dict[str, str]:
    """Round trip check: echoes `payload` with the answering worker's name."""
    return {
        "pong": payload,
        "hostname": str(self.request.hostname or ""),
        "at": timezone.now().isoformat(),
    }
