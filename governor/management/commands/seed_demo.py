from django.core.management.base import BaseCommand

from governor.demo import seed_demo


class Command(BaseCommand):
    help = (
        "Create what is missing of the demo catalog, tenants, deployments and one user per role. "
        "Never changes what exists and never recreates what an admin deleted; --reset restores the demo."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--reset",
            action="store_true",
            help="restore the demo: demo values back, deleted demo objects recreated, demo passwords reset",
        )

    def handle(self, *args, reset: bool = False, **options):
        logins = seed_demo(reset=reset)
        self.stdout.write(self.style.SUCCESS("Demo data restored." if reset else "Demo data ready."))
        self.stdout.write("Sign in as:")
        for username, password, role in logins:
            self.stdout.write(f"  {username:<8} / {password:<18} {role}")
