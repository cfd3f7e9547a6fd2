"""The Celery app, its beat schedule and task entry points."""

from workers.celery import app as celery_app

__all__ = ("celery_app",)
