"""Price versions per public model: typed in by hand, or derived from goodput and published; re-pricing."""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record, fields_of
from billing.models import (
    Price,
    Reprice,
)

log = logging.getLogger(__name__)

# A price above this per million tokens is a typo (the dearest public models cost a few hundred).
PRICE_MAX_PER_MILLION = Decimal("10000")
# How far back a new price may start: the time to fill in the form. Re-pricing the past is
# ``reprice_record``'s job, which leaves the events as billed and records the difference.
PRICE_BACKDATE_GRACE = dt.timedelta(minutes=5)


def price_bounds_check(
    *, input_per_million: Decimal, output_per_million: Decimal, effective_from: dt.datetime | None
) -> None:
    """Refuse absurd prices and backdated ones (the forms and the API reach here through the services)."""
    errors = {}
    for field, value in (
        ("input_per_million", input_per_million),
        ("output_per_million", output_per_million),
    ):
        if value is not None and value > PRICE_MAX_PER_MILLION:
            errors[field] = f"At most ${PRICE_MAX_PER_MILLION} per million tokens."
    if effective_from is not None and effective_from < timezone.now() - PRICE_BACKDATE_GRACE:
        errors["effective_from"] = (
            "A new price cannot start in the past; to bill a past period at another price, "
            "use Re-price (it records the difference and leaves the events as billed)."
        )
    if errors:
        raise ValidationError(errors)


_PRICE_FIELDS = [
    "public_model",
    "input_per_million",
    "output_per_million",
    "effective_from",
    "source",
    "kind",
    "note",
]


@transaction.atomic
def price_set(
    *,
    public_model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    actor,
    effective_from: dt.datetime | None = None,
    note: str = "",
    source: str = "manual",
    kind: str = "online",
) -> Price:
    """Add a price version for a public model (prices are never edited in place: history stays).

    ``kind``: "online" (requests), "batch" (batch lines) or "cache" (semantic cache hits, ADR 0042)."""
    price_bounds_check(
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from,
    )
    price = Price(
        public_model=public_model,
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from or timezone.now(),
        note=note,
        source=source,
        kind=kind,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    price.full_clean()
    price.save()
    audit_record(
        actor=actor, action="price.create", target=price, after=fields_of(price, _PRICE_FIELDS), reason=note
    )
    return price


@transaction.atomic
def price_publish(
    *,
    public_model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    actor,
    provenance: dict,
    effective_from: dt.datetime | None = None,
    note: str = "",
    kind: str = "online",
) -> Price:
    """Publish a derived price as a new version, with where it came from; the gateway uses it from then on.

    ``kind`` "batch" publishes the price batch lines are billed at (docs/decisions/0036).

    ``provenance`` must name its formula and inputs (run id, measured/predicted label, GPU cost
    version). A zero or negative price is refused: a derivation that yields one is wrong, not free.
    """
    errors = {}
    if input_per_million is None or input_per_million <= 0:
        errors["input_per_million"] = "A derived input price must be above $0 per million tokens."
    if output_per_million is None or output_per_million <= 0:
        errors["output_per_million"] = "A derived output price must be above $0 per million tokens."
    if not isinstance(provenance, dict) or not provenance.get("formula"):
        errors["provenance"] = "A derived price records its formula and inputs."
    if errors:
        raise ValidationError(errors)
    price_bounds_check(
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from,
    )
    price = Price(
        public_model=public_model,
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from or timezone.now(),
        note=note,
        source="derived",
        kind=kind,
        provenance=provenance,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    price.full_clean()
    price.save()
    audit_record(
        actor=actor,
        action="price.publish",
        target=price,
        after=fields_of(price, _PRICE_FIELDS),
        reason=note,
        evidence=provenance,
    )
    return price


_REPRICE_SQL = """
SELECT tenant_id, count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),
       coalesce(sum(cost_nanos), 0)
FROM billing_usage_event
WHERE public_model = %s AND started_at >= %s AND started_at < %s
GROUP BY tenant_id ORDER BY tenant_id
"""


@transaction.atomic
def reprice_record(
    *,
    public_model: str,
    period_start: dt.datetime,
    period_end: dt.datetime,
    price: Price,
    reason: str,
    actor,
) -> Reprice:
    """Recompute a past period of one model at another price version and record the result.

    Usage events are never rewritten: they keep the price they were billed at. The re-price row says
    what the period comes to at ``price`` (per tenant) and the difference, for a credit or a true-up.
    """
    errors = {}
    if period_end <= period_start:
        errors["period_end"] = "The period must end after it starts."
    if price.public_model != public_model:
        errors["price"] = f"Price #{price.pk} is for {price.public_model}, not {public_model}."
    if not (reason or "").strip():
        errors["reason"] = "Say why the period is re-priced."
    elif len(reason) > Reprice._meta.get_field("reason").max_length:
        errors["reason"] = f"At most {Reprice._meta.get_field('reason').max_length} characters."
    if errors:
        raise ValidationError(errors)
    by_tenant, billed_total, repriced_total = [], 0, 0
    with connection.cursor() as cur:
        cur.execute(_REPRICE_SQL, [public_model, period_start, period_end])
        for tenant_id, requests, prompt, completion, billed in cur.fetchall():
            prompt, completion, billed = int(prompt), int(completion), int(billed)  # sums come back numeric
            repriced = prompt * price.input_nanos + completion * price.output_nanos
            by_tenant.append(
                {"tenant_id": tenant_id, "requests": requests, "prompt_tokens": prompt,
                 "completion_tokens": completion, "billed_nanos": billed, "repriced_nanos": repriced}
            )  # fmt: skip
            billed_total += billed
            repriced_total += repriced
    rp = Reprice.objects.create(
        public_model=public_model,
        period_start=period_start,
        period_end=period_end,
        price=price,
        billed_nanos=billed_total,
        repriced_nanos=repriced_total,
        by_tenant=by_tenant,
        reason=reason.strip(),
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    audit_record(
        actor=actor,
        action="price.reprice",
        target=rp,
        after=fields_of(
            rp, ["public_model", "period_start", "period_end", "price", "billed_nanos", "repriced_nanos"]
        ),
        reason=rp.reason,
        evidence={"by_tenant": by_tenant},
    )
    return rp
