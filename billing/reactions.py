"""Billing's reactions to events (registered in ``settings.GOVERNOR_REACTIONS``, ADR 0030).

Each runs at least once per event, so each is idempotent: it publishes the current state, or clears a
mark that may already be clear.
"""

from __future__ import annotations

from billing.models import Budget
from billing.services import budgets, gateway_config
from events.services import coalescing


@coalescing
def tenancy_publish(event) -> None:
    """Keys, tenants, limits, budgets and prices changed: publish the gateway's ``tenancy`` section."""
    gateway_config.tenancy_section_publish()


def refusal_mark_clear(event) -> None:
    """A changed budget may have room again: the next refusal, if any, is the one the page shows."""
    tenant_id = event.payload.get("tenant_id")
    budget = Budget.objects.filter(tenant_id=tenant_id).only("period").first()
    if budget is not None:
        budgets._refusal_mark_clear(tenant_id=tenant_id, period=budget.period)
