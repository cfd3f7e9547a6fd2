"""``flush`` that can empty a database whose audit table refuses TRUNCATE.

The test runner flushes the database after every transactional test. The audit table's triggers
refuse TRUNCATE, so this override runs the flush with ``session_replication_role = replica`` (which
skips ordinary triggers). Only a PostgreSQL superuser may set that, so on a production database
run by a non-superuser role the audit table stays protected and a flush fails loudly.
"""

from django.core.management.commands.flush import Command as FlushCommand
from django.db import connections


class Command(FlushCommand):
    def handle(self, **options):
        connection = connections[options["database"]]
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            superuser = bool(cursor.fetchone()[0])
            if superuser:
                cursor.execute("SET session_replication_role = replica")
        try:
            return super().handle(**options)
        finally:
            if superuser:
                with connection.cursor() as cursor:
                    cursor.execute("SET session_replication_role = DEFAULT")
