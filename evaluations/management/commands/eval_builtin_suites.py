"""``manage.py eval_builtin_suites``: register the built-in eval suites that are missing."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from evaluations.services.evals import eval_builtin_suites_register


class Command(BaseCommand):
    help = "Create the built-in eval suites (evalkit's generators) that do not exist yet."

    def handle(self, *args, **options) -> None:
        created = eval_builtin_suites_register(actor="system:seed")
        for version in created:
            self.stdout.write(f"created {version} ({version.case_count} cases)")
        if not created:
            self.stdout.write("every built-in suite exists already")
