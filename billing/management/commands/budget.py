"""``manage.py budget set|show|delete``: a tenant's spending budget."""

from __future__ import annotations

from django.core.management.base import CommandError

from billing.management._cli import (
    ServiceCommand,
    actor_from,
    add_actor_argument,
    decimal_arg,
    tenant_by_slug,
)
from billing.models import Budget
from billing.selectors.budgets import budget_status
from billing.services.budgets import budget_delete, budget_set


class Command(ServiceCommand):
    help = "Set, show or delete a tenant's budget."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        s = sub.add_parser("set", help="create or change the budget")
        s.add_argument("tenant", help="tenant slug")
        s.add_argument("amount_usd")
        s.add_argument("--period", choices=Budget.Period.values, default=Budget.Period.MONTHLY)
        s.add_argument("--thresholds", default="50,80,100", help="soft thresholds in %% (comma-separated)")
        s.add_argument(
            "--hard-cap", default="100", help="reject beyond this %% of the amount; 'none' = no cap"
        )
        add_actor_argument(s)
        show = sub.add_parser("show", help="the budget and this period's spend")
        show.add_argument("tenant")
        delete = sub.add_parser("delete", help="remove the budget (no cap any more)")
        delete.add_argument("tenant")
        add_actor_argument(delete)

    def handle_set(self, *, tenant, amount_usd, period, thresholds, hard_cap, **options):
        try:
            percents = [int(x) for x in thresholds.split(",") if x.strip()]
            cap = None if hard_cap.lower() == "none" else int(hard_cap)
        except ValueError as exc:
            raise CommandError(
                "--thresholds and --hard-cap take whole percentages (or --hard-cap none)"
            ) from exc
        if cap is not None and cap < 1:
            raise CommandError("--hard-cap must be at least 1 (or 'none')")
        budget = budget_set(
            tenant=tenant_by_slug(tenant),
            amount_usd=decimal_arg(amount_usd, "amount_usd"),
            period=period,
            soft_threshold_percents=percents,
            hard_cap_percent=cap,
            actor=actor_from(options),
        )
        self.stdout.write(
            f"{tenant}: ${budget.amount_usd} {budget.period}, hard cap {budget.hard_cap_percent or 'none'}%"
        )

    def handle_show(self, *, tenant, **options):
        status = budget_status(tenant=tenant_by_slug(tenant))
        if status is None:
            raise CommandError(f"{tenant} has no budget")
        for key in ("period_key", "amount_usd", "spent_usd", "left_usd", "used_percent", "hard_cap_usd"):
            self.stdout.write(f"{key}\t{status[key]}")
        self.stdout.write(f"alerts\t{','.join(str(a.percent) for a in status['alerts']) or '-'}")

    def handle_delete(self, *, tenant, **options):
        t = tenant_by_slug(tenant)
        if not Budget.objects.filter(tenant=t).exists():
            raise CommandError(f"{tenant} has no budget")
        budget_delete(tenant=t, actor=actor_from(options))
        self.stdout.write(f"{tenant}: budget deleted")
