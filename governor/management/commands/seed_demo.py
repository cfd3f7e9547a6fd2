from django.core.management.base import BaseCommand

from governor.demo import seed_demo


class Command(BaseCommand):
    help = "Create or refresh the demo catalog, tenants and one user per role (idempotent)."

    def handle(self, *args, **options):
        logins = seed_demo()
        self.stdout.write(self.style.SUCCESS("Demo data ready. Sign in as:"))
        for username, password, role in logins:
            self.stdout.write(f"  {username:<8} / {password:<18} {role}")
