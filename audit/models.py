"""The audit event: one governed change, who made it, and what it changed."""

from __future__ import annotations

import pgtrigger
from django.db import models

# The only UPDATE the table accepts: the seal, which fills the three NULL seal columns of an unsealed
# row and changes nothing else. Everything else (a second seal, an edit, un-sealing) is refused.
_SEAL_COLUMNS = "- 'chain_index' - 'prev_hash' - 'hash'"
NOT_A_SEAL = pgtrigger.Condition(
    "OLD.hash IS NOT NULL OR OLD.chain_index IS NOT NULL OR OLD.prev_hash IS NOT NULL"
    " OR NEW.hash IS NULL OR NEW.chain_index IS NULL OR NEW.prev_hash IS NULL"
    f" OR (to_jsonb(OLD) {_SEAL_COLUMNS}) IS DISTINCT FROM (to_jsonb(NEW) {_SEAL_COLUMNS})"
)


class AuditEvent(models.Model):
    """An append-only record of one governed change (service write, or a raw write a trigger caught)."""

    seq = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, db_index=True, help_text="username, or 'controller', 'system:…'")
    actor_id = models.BigIntegerField(null=True, blank=True)
    role = models.CharField(max_length=32, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64, db_index=True, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    tenant_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    client_address = models.CharField(max_length=64, blank=True)
    # Filled once by the seal (audit.services.audit_seal), never changed after.
    chain_index = models.BigIntegerField(null=True, blank=True, unique=True, editable=False)
    prev_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 (NULL = unsealed)
    hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 (NULL = unsealed)
    # Format 2 (ADR 0018): the writer's Ed25519 signature; events from before it are version 1.
    version = models.PositiveSmallIntegerField(db_default=2, editable=False)
    nonce = models.CharField(max_length=32, null=True, blank=True, unique=True, editable=False)  # noqa: DJ001
    key_id = models.CharField(max_length=16, null=True, blank=True, editable=False)  # noqa: DJ001
    signature = models.CharField(max_length=128, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        ordering = ["seq"]
        indexes = [
            models.Index(fields=["object_type", "object_id", "seq"]),
            models.Index(fields=["seq"], condition=models.Q(hash__isnull=True), name="audit_event_unsealed"),
        ]
        triggers = [
            pgtrigger.Protect(name="audit_event_no_delete", operation=pgtrigger.Delete),
            # TRUNCATE fires no row triggers: it needs its own statement-level one.
            pgtrigger.Trigger(
                name="audit_event_no_truncate",
                operation=pgtrigger.Truncate,
                level=pgtrigger.Statement,
                when=pgtrigger.Before,
                func="RAISE EXCEPTION 'audit trail is append-only: cannot truncate %', TG_TABLE_NAME;",
            ),
            pgtrigger.Trigger(
                name="audit_event_update_only_seals",
                operation=pgtrigger.Update,
                when=pgtrigger.Before,
                condition=NOT_A_SEAL,
                func="RAISE EXCEPTION 'audit trail is append-only: only the seal may update % (seq %)',"
                " TG_TABLE_NAME, OLD.seq;",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.actor} {self.action} {self.object_type}:{self.object_id}"

    @property
    def sealed(self) -> bool:
        return self.hash is not None


class AuditCheckpoint(models.Model):
    """The database's copy of each witness entry (audit.witness): what a truncated witness is
    compared with. The witness, not this table, is the authority against a database attacker."""

    n = models.BigIntegerField(primary_key=True)
    entry = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["n"]

    def __str__(self) -> str:
        return f"witness entry {self.n} ({self.entry.get('type')})"


class AuditCheck(models.Model):
    """The last result of one automatic check of the trail (``chain``, ``seal``; ``drift`` by
    audit.drift), read for the Audit page's badge (``audit.checks.check_results``)."""

    name = models.CharField(max_length=32, primary_key=True)
    ok = models.BooleanField()
    checked_at = models.DateTimeField()
    summary = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {'ok' if self.ok else 'FAIL'} {self.summary}"
