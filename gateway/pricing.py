"""Whether a request may be served at the price in force (ADR 0022).

A model with no price would be served at $0: it would hold nothing and add nothing to spend, so a
tenant's budget and hard cap would never stop its traffic. A route is free only when an admin marked
it so, with a reason (``deployments.services.model_route_free_set``, audited); otherwise a tenant
with a budget is refused, with an error naming the missing price. A tenant without a budget has
nothing such traffic could overrun and is served as before.
"""

from __future__ import annotations

from snapshot.contract import Price, Route, TenantInfo

# A request that costs nothing still holds this much against a hard cap, so that a spent budget
# refuses it too: the admission script admits a zero hold at exactly the cap.
MIN_HOLD_NANOS = 1


def price_refusal(*, model: str, route: Route, price: Price | None, tenant: TenantInfo) -> str | None:
    """The error message when this tenant may not use the route at its price, else None."""
    if price is not None or route.free or tenant.budget is None:
        return None
    return (
        f"the model '{model}' has no price in force (missing price: input and output per million tokens "
        f"for '{model}'), and this tenant has a budget; ask an admin to set a price for it or to mark the "
        "route free"
    )
