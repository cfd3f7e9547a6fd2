"""The database-level guard of rows that are evidence (suite versions, policies, decisions, calibrations)."""

import pgtrigger

# Rows that are evidence: the database itself refuses to change or delete them (not only the ORM).
APPEND_ONLY = [
    pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
]
# The same, except for the creator FK that Django sets to NULL when that user is deleted.
APPEND_ONLY_KEEP_USERS = [
    pgtrigger.Protect(name="append_only_delete", operation=pgtrigger.Delete),
    pgtrigger.Protect(
        name="append_only_update",
        operation=pgtrigger.Update,
        condition=pgtrigger.AnyChange(exclude=["created_by"]),
    ),
]
