"""``manage.py audit_verify``: seal what is pending, walk the hash chain, compare with the published head.

Exit status 0 when the chain verifies; 1 naming the first bad event otherwise.
"""

from django.core.management.base import BaseCommand, CommandError

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

    def handle(self, *args, **options):
        if not options["no_seal"]:
            audit_seal()
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
