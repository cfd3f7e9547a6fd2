"""``manage.py audit_verify``: seal and checkpoint what is pending, compare every governed row with the
state its events say it has (drift; ``--no-drift`` skips it), then walk the whole trail against the
witnessed checkpoints and the published head, naming the first bad event or checkpoint.

Exit status 0 when everything verifies and nothing drifted; 1 otherwise, naming each drifted object
with its differing fields. Both verdicts are stored for the Audit page's badge.
"""

import time

from django.core.management.base import BaseCommand, CommandError

from audit.checks import drift_check_run
from audit.drift import describe_finding
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
        parser.add_argument(
            "--no-drift",
            action="store_true",
            help="skip comparing governed rows with their events",
        )

    def handle(self, *args, **options):
        drifted = [] if options["no_drift"] else self._drift()
        started = time.perf_counter()
        result = audit_verify_record(seal=not options["no_seal"], signatures=options["signatures"])
        seconds = time.perf_counter() - started
        for finding in result.findings:
            self.stderr.write(f"finding: {finding}")
        if not result.ok:
            raise CommandError(result.describe(), returncode=1)
        rate = f" in {seconds:.2f} s ({result.checked / seconds:,.0f} events/s)" if seconds > 0 else ""
        self.stdout.write(self.style.SUCCESS(result.describe() + rate))
        if drifted:
            raise CommandError(f"DRIFT in {len(drifted)} governed object(s); see above", returncode=1)

    def _drift(self) -> list[dict]:
        """Compare governed rows with their events; print each finding. Runs before the chain verdict,
        so a broken chain does not hide drift."""
        check = drift_check_run()
        findings = check.details["findings"]
        for finding in findings:
            self.stderr.write(f"DRIFT {describe_finding(finding)}")
        if not findings:
            self.stdout.write(self.style.SUCCESS(f"OK drift: {check.summary}"))
        return findings
