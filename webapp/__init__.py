"""The gemmforge Django project: stores and renders what engine/ produces; Celery runs the work."""

from webapp.celery import app as celery_app

__all__ = ["celery_app"]
