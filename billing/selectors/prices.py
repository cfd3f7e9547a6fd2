"""Price reads: the version in force and the history."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from billing.models import (
    Price,
)


def price_for(*, public_model: str, at: dt.datetime | None = None, kind: str = "online") -> Price | None:
    """THE price lookup: the price in force for a public model at a time (latest effective_from ≤ at).

    Every cost the platform computes goes through here (or ``prices_in_force``, which applies the
    same rule to all models), so a later goodput-derived price source only has to change this.
    """
    at = at or timezone.now()
    return (
        Price.objects.filter(public_model=public_model, kind=kind, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )


def prices_in_force(*, at: dt.datetime | None = None, kind: str = "online") -> dict[str, Price]:
    """The price in force for every public model that has one (same rule as ``price_for``)."""
    at = at or timezone.now()
    rows = Price.objects.filter(kind=kind, effective_from__lte=at).order_by("public_model", "-effective_from")
    out: dict[str, Price] = {}
    for p in rows:
        out.setdefault(p.public_model, p)
    return out


def price_list() -> QuerySet[Price]:
    return Price.objects.select_related("created_by").order_by("public_model", "-effective_from")


def price_get(*, pk: int) -> Price | None:
    return Price.objects.filter(pk=pk).first()


def price_history(*, public_model: str) -> QuerySet[Price]:
    """Every version of a model's price, newest first (in force and earlier, and any scheduled)."""
    return (
        Price.objects.filter(public_model=public_model)
        .select_related("created_by")
        .order_by("-effective_from")
    )


def reprice_list() -> QuerySet:
    from billing.models import Reprice

    return Reprice.objects.select_related("price", "created_by").order_by("-created_at")


def public_model_exists(*, public_model: str) -> bool:
    """Whether a route answers to ``public_model`` (``settings.BILLING_PUBLIC_MODEL_NAMES`` says how)."""
    path = getattr(settings, "BILLING_PUBLIC_MODEL_NAMES", "")
    if not path:
        return True  # a project without routes prices any name
    return public_model in import_string(path)()
