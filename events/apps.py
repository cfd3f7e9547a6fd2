"""The event spine (ADR 0030): the outbox, its deliveries, the dispatcher and the sweep."""

from django.apps import AppConfig
from django.core import checks


class EventsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "events"
    verbose_name = "Event spine"

    def ready(self) -> None:
        from events.checks import reactions_check

        # Every manage.py command (migrate at start, runserver, check) refuses a reaction that cannot
        # be imported, before any event is emitted for it.
        checks.register(reactions_check, "events")
