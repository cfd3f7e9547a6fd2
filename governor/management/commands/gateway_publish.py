"""Publish the gateway's whole snapshot (tenancy and routes) from the database now.

The launcher runs it at every start, before any process serves: the routes then carry this start's
statuses (a deployment Ray has not reported on since the start reads UNKNOWN, and the gateway does not
route to it) instead of whatever the previous run left in Redis.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from billing.services.gateway_config import tenancy_section_publish
from deployments.services import routes_section_publish


class Command(BaseCommand):
    help = "Publish the gateway snapshot (tenancy and routes) from the database."

    def handle(self, *args, **options):
        tenancy_section_publish()
        version = routes_section_publish()
        self.stdout.write(f"gateway snapshot published (version {version})")
