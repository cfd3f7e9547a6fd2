"""Deployments."""

from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"

    def ready(self) -> None:
        # Make the project's Celery app (Redis broker, settings) the current one in every process
        # that loads Django: the console's on-commit reconcile must not go to Celery's default app.
        import workers  # noqa: F401
