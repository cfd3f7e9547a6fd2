"""What the semantic cache saved a tenant (docs/semantic-cache.md): its hits, the tokens they
answered without a model, what they were billed at the cache price and what the model would have
cost beyond that (``UsageEvent.saved_nanos``, written by the gateway at the price in force).

It reads the usage events of the range (the rollups do not keep cache hits apart), through the
``(tenant, started_at)`` index and only the hits; one query, grouped by model.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import Count, F, Sum

from billing.models import NANOS_PER_USD, UsageEvent


def cache_savings(*, tenant_id: int, since: dt.datetime, until: dt.datetime) -> dict:
    """``{"hits", "tokens", "billed_usd", "saved_usd", "by_model": [...]}`` for the range."""
    rows = list(
        UsageEvent.objects.filter(
            tenant_id=tenant_id, started_at__gte=since, started_at__lt=until, cache_hit=True
        )
        .values("public_model")
        .annotate(
            hits=Count("id"),
            tokens=Sum(F("prompt_tokens") + F("completion_tokens")),
            billed=Sum("cost_nanos"),
            saved=Sum("saved_nanos"),
        )
        .order_by("-saved", "public_model")
    )
    by_model = [
        {
            "label": r["public_model"],
            "hits": r["hits"],
            "tokens": r["tokens"] or 0,
            "billed_usd": Decimal(r["billed"] or 0) / NANOS_PER_USD,
            "saved_usd": Decimal(r["saved"] or 0) / NANOS_PER_USD,
        }
        for r in rows
    ]
    return {
        "hits": sum(m["hits"] for m in by_model),
        "tokens": sum(m["tokens"] for m in by_model),
        "billed_usd": sum((m["billed_usd"] for m in by_model), start=Decimal(0)),
        "saved_usd": sum((m["saved_usd"] for m in by_model), start=Decimal(0)),
        "by_model": by_model,
    }
