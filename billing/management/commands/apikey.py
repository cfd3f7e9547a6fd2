"""``manage.py apikey create|revoke|list``: tenants' gateway keys from a script."""

from __future__ import annotations

from django.core.management.base import CommandError

from billing.management._cli import ServiceCommand, actor_from, add_actor_argument, tenant_by_slug
from billing.models import ApiKey
from billing.services.keys import api_key_create, api_key_revoke


class Command(ServiceCommand):
    help = "Create (prints the secret once), revoke and list gateway API keys."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a key; the secret is printed once, never stored")
        create.add_argument("tenant", help="tenant slug")
        create.add_argument("name")
        create.add_argument("--models", default="", help="comma-separated public models (default: all)")
        create.add_argument("--rpm", type=int, default=0, help="requests per minute (0 = no key limit)")
        create.add_argument("--tpm", type=int, default=0, help="tokens per minute (0 = no key limit)")
        add_actor_argument(create)
        revoke = sub.add_parser("revoke", help="revoke a key by its prefix (gk-…) or id")
        revoke.add_argument("key")
        add_actor_argument(revoke)
        lst = sub.add_parser("list", help="keys (never their secrets)")
        lst.add_argument("--tenant", help="only this tenant's keys")

    def handle_create(self, *, tenant, name, models, rpm, tpm, **options):
        if rpm < 0 or tpm < 0:
            raise CommandError("--rpm and --tpm must be 0 or more")
        key, secret = api_key_create(
            tenant=tenant_by_slug(tenant),
            name=name,
            actor=actor_from(options),
            allowed_models=[m.strip() for m in models.split(",") if m.strip()],
            rpm_limit=rpm,
            tpm_limit=tpm,
        )
        self.stderr.write(f"created key {key.prefix}… for {tenant} (id {key.pk}); the secret is shown once:")
        self.stdout.write(secret)

    def handle_revoke(self, *, key, **options):
        qs = (
            ApiKey.objects.filter(pk=int(key))
            if key.isdigit()
            else ApiKey.objects.filter(prefix=key.rstrip("…"))
        )
        matches = list(qs[:2])
        if not matches:
            raise CommandError(f"no key with id or prefix {key!r}")
        if len(matches) > 1:
            raise CommandError(f"prefix {key!r} matches several keys; use the id")
        api_key = api_key_revoke(api_key=matches[0], actor=actor_from(options))
        self.stdout.write(f"revoked {api_key.prefix}… ({api_key.tenant.slug}/{api_key.name})")

    def handle_list(self, *, tenant, **options):
        qs = ApiKey.objects.select_related("tenant").order_by("tenant__slug", "created_at")
        if tenant:
            qs = qs.filter(tenant=tenant_by_slug(tenant))
        for k in qs:
            state = f"revoked {k.revoked_at:%Y-%m-%d}" if k.revoked_at else "active"
            models = ",".join(k.allowed_models) or "all"
            self.stdout.write(f"{k.pk}\t{k.prefix}…\t{k.tenant.slug}\t{k.name}\t{models}\t{state}")
