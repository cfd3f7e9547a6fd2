"""What the operators' commands share: who the actor is, and errors that exit non-zero."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from billing.models import Tenant

CLI_ACTOR = "system:cli"


def add_actor_argument(parser) -> None:
    parser.add_argument(
        "--actor",
        metavar="USER",
        help=f"record the change as this user's (default: {CLI_ACTOR!r}, an operator at the shell)",
    )


def actor_from(options):
    username = options.get("actor")
    if not username:
        return CLI_ACTOR
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist as exc:
        raise CommandError(f"--actor: no user named {username!r}") from exc


def tenant_by_slug(slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist as exc:
        known = ", ".join(Tenant.objects.order_by("slug").values_list("slug", flat=True)[:20]) or "none yet"
        raise CommandError(f"no tenant with slug {slug!r} (known: {known})") from exc


def decimal_arg(value: str, name: str) -> Decimal:
    try:
        d = Decimal(value)
    except InvalidOperation as exc:
        raise CommandError(f"{name}: {value!r} is not a number") from exc
    if not d.is_finite() or d < 0:
        raise CommandError(f"{name}: must be a non-negative number, got {value!r}")
    return d


def validation_message(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return " ".join(exc.messages)


class ServiceCommand(BaseCommand):
    """A command with sub-commands (``handle_<action>``) whose ValidationErrors become CommandErrors."""

    def handle(self, *args, **options):
        action = options["action"].replace("-", "_")
        try:
            return getattr(self, f"handle_{action}")(**options)
        except ValidationError as exc:
            raise CommandError(validation_message(exc)) from exc
