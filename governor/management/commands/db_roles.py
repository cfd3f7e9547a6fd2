"""``manage.py db_roles``: print (or apply) the SQL that sets up the owner and application roles.

For an external PostgreSQL: run it as a superuser against the application's database, point
``MIGRATE_DATABASE_URL`` at the owner role and ``DATABASE_URL`` at the application role, then run
``migrate``. Idempotent; rerun it after an upgrade. See docs/decisions/0020.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from governor.db_roles import DEFAULT_APP, DEFAULT_OWNER, db_roles_script, db_roles_sql


class Command(BaseCommand):
    help = "Print, or apply as a superuser, the SQL that creates the owner and application database roles."

    def add_arguments(self, parser):
        parser.add_argument("--owner", default=DEFAULT_OWNER, help="role that owns the schema and migrates")
        parser.add_argument("--app", default=DEFAULT_APP, help="role the console, workers and beat log in as")
        parser.add_argument(
            "--owner-password", default=None, help="set the owner's password (else unchanged)"
        )
        parser.add_argument(
            "--app-password", default=None, help="set the app role's password (else unchanged)"
        )
        parser.add_argument("--database", default=None, help="database name (default: DATABASE_URL's)")
        parser.add_argument(
            "--apply",
            action="store_true",
            help="run the statements on the default connection (it must be a superuser) instead of printing",
        )

    def handle(self, *args, **options):
        connection = connections[DEFAULT_DB_ALIAS]
        kwargs = dict(
            database=options["database"] or connection.settings_dict["NAME"],
            owner=options["owner"],
            app=options["app"],
            owner_password=options["owner_password"],
            app_password=options["app_password"],
        )
        try:
            statements = db_roles_sql(**kwargs)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if not options["apply"]:
            self.stdout.write(db_roles_script(**kwargs), ending="")
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            if not cursor.fetchone()[0]:
                raise CommandError(
                    "--apply needs a superuser connection (DATABASE_URL); or print and run the SQL"
                )
            for statement in statements:
                cursor.execute(statement)
        self.stdout.write(
            self.style.SUCCESS(
                f"roles {kwargs['owner']} (owner) and {kwargs['app']} (application) are set up"
            )
        )
