"""``manage.py tenant create|list|member-add|member-remove``: set up tenants from a script."""

from __future__ import annotations

from billing.management._cli import ServiceCommand, actor_from, add_actor_argument, tenant_by_slug
from billing.models import Membership, Tenant
from billing.services.tenancy import membership_remove, membership_set, tenant_create, user_by_username


class Command(ServiceCommand):
    help = "Create and list tenants, and add or remove their members (audited as system:cli or --actor)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a tenant")
        create.add_argument("name")
        create.add_argument("--slug", help="defaults to the slugified name")
        add_actor_argument(create)
        sub.add_parser("list", help="tenants with their members")
        add = sub.add_parser("member-add", help="add a user to a tenant, or change their role")
        add.add_argument("slug")
        add.add_argument("username")
        add.add_argument("--role", choices=Membership.Role.values, default=Membership.Role.MEMBER)
        add_actor_argument(add)
        remove = sub.add_parser("member-remove", help="take a user out of a tenant")
        remove.add_argument("slug")
        remove.add_argument("username")
        add_actor_argument(remove)

    def handle_create(self, *, name, slug, **options):
        tenant = tenant_create(name=name, slug=slug, actor=actor_from(options))
        self.stdout.write(f"created tenant {tenant.slug} ({tenant.name})")

    def handle_list(self, **options):
        for t in Tenant.objects.order_by("slug").prefetch_related("memberships__user"):
            members = ", ".join(
                f"{m.user.username}:{m.role}"
                for m in sorted(t.memberships.all(), key=lambda m: m.user.username)
            )
            state = "active" if t.is_active else "inactive"
            self.stdout.write(f"{t.slug}\t{t.name}\t{state}\t{members or '-'}")

    def handle_member_add(self, *, slug, username, role, **options):
        tenant = tenant_by_slug(slug)
        user = user_by_username(username=username)
        membership_set(user=user, tenant=tenant, role=role, actor=actor_from(options))
        self.stdout.write(f"{user.username} is {role} of {tenant.slug}")

    def handle_member_remove(self, *, slug, username, **options):
        from django.core.management.base import CommandError

        tenant = tenant_by_slug(slug)
        membership = Membership.objects.filter(tenant=tenant, user__username=username).first()
        if membership is None:
            raise CommandError(f"{username!r} is not a member of {slug!r}")
        membership_remove(membership=membership, actor=actor_from(options))
        self.stdout.write(f"{username} removed from {tenant.slug}")
