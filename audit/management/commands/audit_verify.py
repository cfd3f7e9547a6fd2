"""``manage.py audit_verify``: seal and checkpoint what is pending, then walk the whole trail against
the witnessed checkpoints and the published head, naming the first bad event or checkpoint.

Exit status 0 when everything verifies; 1 otherwise. The verdict is stored for the console's badge.
"""

import time

from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_verify_record


class Command(BaseCommand):
    help = "Verify the audit trail against the witnessed, signed checkpoints (ADR 0018)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-seal",
            action="store_true",
            help="verify only what is sealed; do not seal and checkpoint pending events first",
        )
        parser.add_argument(
            "--signatures",
            choices=["unwitnessed", "all", "none"],
            default="unwitnessed",
            help="whose Ed25519 signatures to check (default: the events no checkpoint covers yet)",
        )

    def handle(self, *args, **options):
        started = time.perf_counter()
        result = audit_verify_record(seal=not options["no_seal"], signatures=options["signatures"])
        seconds = time.perf_counter() - started
        for finding in result.findings:
            self.stderr.write(f"finding: {finding}")
        if not result.ok:
            raise CommandError(result.describe(), returncode=1)
        rate = f" in {seconds:.2f} s ({result.checked / seconds:,.0f} events/s)" if seconds > 0 else ""
        self.stdout.write(self.style.SUCCESS(result.describe() + rate))
