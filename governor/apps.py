from django.apps import AppConfig


class GovernorConfig(AppConfig):
    """The project package as an app: its templates, management commands and start-up wiring."""

    name = "governor"
    verbose_name = "Governor"

    def ready(self) -> None:
        # Make the project's Celery app (Redis broker, settings) the current one in every process
        # that loads Django, so tasks sent from the console or a command reach Redis. This lives here
        # rather than in governor/__init__.py, which must stay stdlib-only for the bootstrap.
        import workers  # noqa: F401
        from core.db import register_utc_dumpers

        register_utc_dumpers()
