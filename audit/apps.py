"""The audit trail: an append-only record of every governed change (a leaf app: imports no other app)."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _install_raw_capture(sender, using="default", **kwargs):
    from audit.privileges import audit_privileges_lock
    from audit.raw_capture import install_raw_capture

    install_raw_capture(using=using)
    # Runs as the owner (migrate does); takes back any write grant on the trail given since.
    audit_privileges_lock(using=using)


class AuditConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        # After every migrate (all apps' tables exist by then), refresh the raw-write triggers.
        post_migrate.connect(_install_raw_capture, sender=self, dispatch_uid="audit_install_raw_capture")
