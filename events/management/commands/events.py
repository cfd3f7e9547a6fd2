"""``manage.py events``: what the outbox holds, deliver what is due now, or retry what gave up."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from events.models import Delivery
from events.selectors import deliveries_summary
from events.services import deliveries_dispatch, deliveries_retry_failed


class Command(BaseCommand):
    help = "Show the event outbox's deliveries; --dispatch delivers what is due; --retry-failed requeues failures."

    def add_arguments(self, parser):
        parser.add_argument(
            "--dispatch", action="store_true", help="deliver every due delivery now (the sweep)"
        )
        parser.add_argument(
            "--retry-failed", action="store_true", help="put deliveries that gave up back in line"
        )
        parser.add_argument("--reaction", default=None, help="with --retry-failed: only this reaction's")

    def handle(self, *args, dispatch=False, retry_failed=False, reaction=None, **options):
        if retry_failed:
            self.stdout.write(f"requeued {deliveries_retry_failed(reaction=reaction)} failed deliveries")
        if dispatch:
            self.stdout.write(f"settled {deliveries_dispatch()} deliveries")
        s = deliveries_summary()
        self.stdout.write(f"due {s['due']}, waiting for a retry {s['waiting']}, failed {s['failed']}")
        for d in Delivery.objects.filter(status=Delivery.Status.FAILED).select_related("event")[:50]:
            self.stdout.write(
                f"  failed: {d.reaction} on {d.event} after {d.attempts} attempts: {d.last_error}"
            )
