"""The FOCUS 1.2 dataset of a tenant's charges, row by row, read from the daily rollups (ADR 0022).

One row per charge and SKU: a rollup row (day × model × version × key × deployment × price version ×
traffic class, the last as the tag ``x_governor/traffic_class``)
becomes an "input tokens" row and an "output tokens" row, each priced at the unit price of the price
version the gateway billed it at, so ``ListUnitPrice × PricingQuantity = ListCost`` holds on every
row (the spec's ListCost/ContractedCost requirements). Cached input tokens are billed at the input
price (``Price`` has no cached rate), so they are not a SKU of their own: the input row says how many
there were in ``x_CachedInputTokens``.

Cost the published unit prices do not explain (events billed without a price version) is not hidden
in a unit price: it is an "Adjustment" row. A re-pricing (``Reprice``) is a "Correction" of the
billing period it re-priced when that period is closed, an "Adjustment" when it is the current one.

Rows come out as a generator over a server-side cursor, so an export of any size streams.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal

from billing.models import Price, Reprice, Tenant
from billing.selectors.costs import daily_rollups

FOCUS_VERSION = "1.2"

# Every column FOCUS 1.2 makes mandatory, then the conditional and recommended ones that apply to
# token-metered inference (the provider publishes a price list, measures usage and has sub accounts
# and tags), in the spec's alphabetical order; custom columns last, each prefixed ``x_``.
FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId",
    "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
]  # fmt: skip
CUSTOM_COLUMNS = [
    "x_Requests", "x_Errors", "x_CachedInputTokens", "x_PriceVersionId", "x_RepriceId",
]  # fmt: skip
COLUMNS = FOCUS_COLUMNS + CUSTOM_COLUMNS

PROVIDER = "Governor"
SERVICE_NAME = "Governor LLM inference"
# Prices are published per million tokens; UnitFormat allows "<quantity> <plural-units>" with a
# whole-number quantity ("1000 Tokens" is the spec's own example).
PRICING_UNIT = "1000000 Tokens"
TOKENS_PER_PRICING_UNIT = 1_000_000
CONSUMED_UNIT = "Tokens"
# Provider-defined tag keys carry one prefix of the provider's own (the Tags requirements), ``x_``
# like every custom name in the dataset.
TAG_PREFIX = "x_governor/"
SKUS = (("input", "Input Tokens"), ("output", "Output Tokens"))


def _dt(t: dt.datetime) -> str:
    """DateTimeFormat: extended ISO 8601 in UTC ending in 'Z', with seconds."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _usd(nanos: int) -> str:
    return format(Decimal(nanos).scaleb(-9), "f")


def _month(t: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    t = t.astimezone(dt.UTC)
    start = dt.datetime(t.year, t.month, 1, tzinfo=dt.UTC)
    end = dt.datetime(start.year + (start.month == 12), start.month % 12 + 1, 1, tzinfo=dt.UTC)
    return start, end


def sku_id(public_model: str, direction: str) -> str:
    """A SKU: one public model's input or output tokens. Stable across price versions and tenants."""
    return f"{public_model}/{direction}-tokens"


def focus_sku_prices(*, price: Price) -> list[dict]:
    """The price list entries of one price version, as the FOCUS export references them."""
    return [
        {
            "sku_id": sku_id(price.public_model, direction),
            "sku_price_id": sku_id(price.public_model, direction),
            "sku_meter": meter,
            "pricing_unit": PRICING_UNIT,
            "list_unit_price": format(
                price.input_per_million if direction == "input" else price.output_per_million, "f"
            ),
            "currency": "USD",
        }
        for direction, meter in SKUS
    ]


def _base(
    tenant: Tenant, charge_start: dt.datetime, charge_end: dt.datetime, billing_at: dt.datetime
) -> dict:
    bp_start, bp_end = _month(billing_at)
    return {
        "BillingAccountId": "governor",
        "BillingAccountName": "Governor platform",
        "BillingCurrency": "USD",
        "BillingPeriodStart": _dt(bp_start),
        "BillingPeriodEnd": _dt(bp_end),
        "ChargePeriodStart": _dt(charge_start),
        "ChargePeriodEnd": _dt(charge_end),
        "InvoiceId": None,  # the platform issues no invoices; tenants are charged back from this dataset
        "InvoiceIssuerName": PROVIDER,
        "ProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "ServiceCategory": "AI and Machine Learning",
        "ServiceName": SERVICE_NAME,
        "ServiceSubcategory": "Generative AI",
        "SubAccountId": tenant.slug,
        "SubAccountName": tenant.name,
    }


def _cost_only(row: dict, nanos: int, *, category: str, charge_class: str | None, description: str) -> dict:
    """A charge with no unit price or quantity: every cost column is the amount (ListCost and the
    others "MUST match the BilledCost" for a charge unrelated to other charges)."""
    amount = _usd(nanos)
    row.update(
        BilledCost=amount, EffectiveCost=amount, ListCost=amount, ContractedCost=amount,
        ChargeCategory=category, ChargeClass=charge_class, ChargeDescription=description,
        ChargeFrequency="One-Time" if category == "Adjustment" else "Usage-Based",
    )  # fmt: skip
    return row


_ROLLUP_FIELDS = (
    "bucket_start", "public_model", "version_id", "api_key_id", "deployment_id", "price_id", "traffic_class",
    "requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_nanos",
)  # fmt: skip


def focus_rows(*, tenant: Tenant, since: dt.datetime, until: dt.datetime) -> Iterator[dict]:
    """The tenant's FOCUS rows for the days starting in [since, until), then its re-pricings recorded
    in that range. Each row is a dict over ``COLUMNS`` (``None`` is null)."""
    rollups = daily_rollups(tenant_id=tenant.pk, since=since, until=until)
    price_ids = set(rollups.exclude(price_id=0).values_list("price_id", flat=True).distinct())
    prices = {p.pk: p for p in Price.objects.filter(pk__in=price_ids)}
    rows = rollups.order_by(
        "bucket_start", "public_model", "api_key_id", "deployment_id", "price_id", "traffic_class"
    )
    for r in rows.values_list(*_ROLLUP_FIELDS).iterator(chunk_size=2000):
        (
            day,
            model,
            version_id,
            key_id,
            dep_id,
            price_id,
            traffic_class,
            requests,
            errors,
            prompt,
            completion,
            cached,
            cost,
        ) = r
        yield from _usage_rows(
            tenant, day.astimezone(dt.UTC), model, version_id, key_id, dep_id, prices.get(price_id),
            requests, errors, prompt, completion, cached, cost, traffic_class,
        )  # fmt: skip
    yield from _reprice_rows(tenant, since, until)


def _usage_rows(
    tenant, day, model, version_id, key_id, dep_id, price: Price | None, requests, errors, prompt, completion,
    cached, cost, traffic_class: str = "standard",
) -> Iterator[dict]:  # fmt: skip
    tags = {
        f"{TAG_PREFIX}traffic_class": traffic_class,
        f"{TAG_PREFIX}api_key_id": str(key_id) if key_id else None,
        f"{TAG_PREFIX}deployment_id": str(dep_id) if dep_id else None,
        f"{TAG_PREFIX}model_version_id": str(version_id) if version_id else None,
    }
    tags = {k: v for k, v in tags.items() if v is not None}
    common = {
        "ResourceId": f"model/{model}" + (f"/version/{version_id}" if version_id else ""),
        "ResourceName": model,
        "ResourceType": "Model",
        "Tags": json.dumps(tags, sort_keys=True) if tags else None,
        "x_PriceVersionId": price.pk if price else None,
    }
    explained = 0
    for direction, meter in SKUS:
        tokens = prompt if direction == "input" else completion
        if direction == "output" and not tokens:
            continue  # nothing generated (embeddings, failed requests): no charge for that SKU
        per_million = (price.input_per_million if direction == "input" else price.output_per_million) if price else Decimal(0)  # fmt: skip
        nanos = tokens * ((price.input_nanos if direction == "input" else price.output_nanos) if price else 0)
        explained += nanos
        amount = _usd(nanos)
        unit_price = format(per_million, "f")
        sku = sku_id(model, direction)
        row = _base(tenant, day, day + dt.timedelta(days=1), day)
        row.update(common)
        row.update(
            BilledCost=amount, EffectiveCost=amount, ListCost=amount, ContractedCost=amount,
            ListUnitPrice=unit_price, ContractedUnitPrice=unit_price, PricingCategory="Standard",
            PricingQuantity=format(Decimal(tokens).scaleb(-6), "f"), PricingUnit=PRICING_UNIT,
            ConsumedQuantity=str(tokens), ConsumedUnit=CONSUMED_UNIT,
            ChargeCategory="Usage", ChargeClass=None, ChargeFrequency="Usage-Based",
            ChargeDescription=f"{model}: {tokens} {meter.lower()}",
            SkuId=sku, SkuPriceId=sku, SkuMeter=meter,
            SkuPriceDetails=json.dumps({"x_TokenDirection": direction}),
            x_Requests=requests if direction == "input" else None,
            x_Errors=errors if direction == "input" else None,
            x_CachedInputTokens=cached if direction == "input" else None,
        )  # fmt: skip
        yield row
    if cost != explained:
        row = _base(tenant, day, day + dt.timedelta(days=1), day)
        row.update(common)
        yield _cost_only(
            row,
            cost - explained,
            category="Adjustment",
            charge_class=None,
            description=f"{model}: cost billed without a published unit price for it",
        )


def _reprice_rows(tenant: Tenant, since: dt.datetime, until: dt.datetime) -> Iterator[dict]:
    reprices = Reprice.objects.filter(created_at__gte=since, created_at__lt=until).order_by(
        "created_at", "pk"
    )
    for rp in reprices.iterator(chunk_size=200):
        mine = [t for t in rp.by_tenant if t.get("tenant_id") == tenant.pk]
        delta = sum(int(t["repriced_nanos"]) - int(t["billed_nanos"]) for t in mine)
        if not delta:
            continue
        # The delta is charged in the billing period the re-pricing was recorded in. It corrects a
        # previously invoiced period when the re-priced period started before that one; ChargeClass
        # "MUST be null ... when it represents a correction within the current billing period".
        row = _base(tenant, rp.period_start, rp.period_end, rp.created_at)
        closed = rp.period_start.astimezone(dt.UTC) < _month(rp.created_at)[0]
        row.update(
            ResourceId=f"model/{rp.public_model}", ResourceName=rp.public_model, ResourceType="Model",
            x_PriceVersionId=rp.price_id, x_RepriceId=rp.pk,
        )  # fmt: skip
        yield _cost_only(
            row,
            delta,
            category="Usage" if closed else "Adjustment",
            charge_class="Correction" if closed else None,
            description=f"{rp.public_model}: re-priced at price version #{rp.price_id} ({rp.reason})",
        )
