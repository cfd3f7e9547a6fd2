"""``manage.py audit_verify``: seal what is pending, walk the hash chain, compare with the published head,
then compare every governed row with the state its events say it has (drift; ``--no-drift`` skips it).

Exit status 0 when the chain verifies and nothing drifted; 1 naming the first bad event, or each
drifted object with its differing fields, otherwise. The drift result is stored for the Audit page.
"""

from django.core.management.base import BaseCommand, CommandError

from audit.checks import drift_check_run
from audit.drift import describe_finding
from audit.head import published_head
from audit.selectors import chain_verify
from audit.services import audit_seal


class Command(BaseCommand):
    help = "Verify the audit trail's hash chain against the head published outside the database."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-seal",
            action="store_true",
            help="verify only what is sealed; do not seal pending events first",
        )
        parser.add_argument(
            "--allow-missing-head",
            action="store_true",
            help="pass when no head is published (Redis lost it); a truncated tail then goes unnoticed",
        )
        parser.add_argument(
            "--no-drift",
            action="store_true",
            help="skip comparing governed rows with their events",
        )

    def handle(self, *args, **options):
        if not options["no_seal"]:
            audit_seal()
        drifted = [] if options["no_drift"] else self._drift()
        published = published_head()
        result = chain_verify(published=published)
        if published is None and result.checked and not options["allow_missing_head"]:
            raise CommandError(
                f"no published head in Redis for a chain of {result.checked} events: a truncated tail or a"
                " rewritten chain cannot be ruled out (compare with the head in the logs or an export, then"
                " rerun with --allow-missing-head)",
                returncode=1,
            )
        if published is None:
            self.stderr.write(
                "warning: no published head found in Redis; a truncated tail cannot be detected"
            )
        else:
            self.stdout.write(f"published head index={published.index} hash={published.hash}")
        if not result.ok:
            raise CommandError(result.describe(), returncode=1)
        self.stdout.write(self.style.SUCCESS(result.describe()))
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
