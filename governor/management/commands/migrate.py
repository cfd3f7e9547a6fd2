"""``migrate`` as the owner role when ``MIGRATE_DATABASE_URL`` names one (docs/decisions/0020).

The application's own role (``DATABASE_URL``) owns nothing and cannot change the schema; this
command alone switches the ``default`` connection to the owner's user and password for its run
(database, host and port stay ``DATABASE_URL``'s, so a test database is migrated the same way).
"""

from django.conf import settings
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DEFAULT_DB_ALIAS, connections


class Command(MigrateCommand):
    def handle(self, *args, **options):
        owner = getattr(settings, "MIGRATE_DATABASE", None)
        if owner is None or options["database"] != DEFAULT_DB_ALIAS:
            return super().handle(*args, **options)
        connection = connections[DEFAULT_DB_ALIAS]
        saved = {key: connection.settings_dict[key] for key in ("USER", "PASSWORD")}
        connection.close()
        connection.settings_dict.update(USER=owner["USER"], PASSWORD=owner["PASSWORD"])
        try:
            return super().handle(*args, **options)
        finally:
            connection.close()
            connection.settings_dict.update(saved)
