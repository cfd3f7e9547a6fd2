"""FOCUS 1.2 conformance of the tenant's FOCUS export, checked on a real export (ADR 0022).

Each test names the FOCUS requirement it checks (attribute or column ID, as the specification at
https://github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec tag v1.2 names it) and quotes the
normative sentence. The export is produced through the view from usage events rolled up by the real
rollup, with prices an admin set, a re-pricing of a closed period and one of the current period; the
rules below come from the specification's text, not from the view's constants.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import tracemalloc
import uuid
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import Price, UsageEvent, UsageRollup
from billing.services.prices import price_set, reprice_record
from billing.services.rollups import usage_rollup_run

pytestmark = pytest.mark.django_db

# --- from the specification (v1.2), not from the code under test ----------------------------------
# Every column FOCUS 1.2 defines (specification/columns/*.md, "Column ID").
SPEC_COLUMNS = {
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "CapacityReservationId",
    "CapacityReservationStatus", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountQuantity", "CommitmentDiscountStatus",
    "CommitmentDiscountType", "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingCurrency", "PricingCurrencyContractedUnitPrice", "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId",
    "SubAccountName", "SubAccountType", "Tags",
}  # fmt: skip
# "Feature level: Mandatory" in the column's content constraints.
MANDATORY = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
]  # fmt: skip
# Conditional columns whose condition holds for a provider that publishes a price list (SkuId,
# SkuPriceId, SkuMeter, SkuPriceDetails, ListUnitPrice), measures usage (ConsumedQuantity/Unit), has
# sub accounts (SubAccountId/Name) and sets provider-defined tags (Tags).
CONDITIONAL_THAT_APPLY = [
    "ConsumedQuantity", "ConsumedUnit", "ListUnitPrice", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId",
    "SubAccountId", "SubAccountName", "Tags",
]  # fmt: skip
# "Allows nulls: False".
NOT_NULL = [
    "BilledCost", "BillingAccountId", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "ChargeCategory", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "ProviderName", "PublisherName", "ServiceCategory",
    "ServiceName", "ServiceSubcategory",
]  # fmt: skip
DATETIME_COLUMNS = ["BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"]
DECIMAL_COLUMNS = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ListUnitPrice", "ContractedUnitPrice",
    "PricingQuantity", "ConsumedQuantity",
]  # fmt: skip
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
CHARGE_FREQUENCIES = {"One-Time", "Recurring", "Usage-Based"}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
SERVICE_CATEGORIES = {
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases", "Developer Tools",
    "Multicloud", "Identity", "Integration", "Internet of Things", "Management and Governance", "Media",
    "Migration", "Mobile", "Networking", "Security", "Storage", "Web", "Other",
}  # fmt: skip
AI_SUBCATEGORIES = {
    "AI Platforms", "Bots", "Generative AI", "Machine Learning", "Natural Language Processing",
    "Other (AI and Machine Learning)",
}  # fmt: skip
# DateTimeFormat: "extended ISO 8601 format with UTC offset ('YYYY-MM-DDTHH:mm:ssZ')".
DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
# NumericFormat: integer, decimal or "mEn" E notation; a sign only for negatives; no commas or units.
NUMERIC_RE = re.compile(r"^-?(\d+|\d+\.\d+|\d*\.\d+)(E-?\d+)?$")
# UnitFormat: "<plural-units>", "<singular-unit>-<plural-time-units>", "<plural-units>/<singular-time-unit>",
# or with a whole-number quantity "<quantity> <plural-units>" ("1000 Tokens").
UNIT_RE = re.compile(r"^(\d+ )?[A-Z][A-Za-z]*(-[A-Z][a-z]+|/[A-Z][a-z]+|/\d+ [A-Z][a-z]+)?$")
PASCAL_RE = re.compile(r"^[A-Z][a-zA-Z0-9]*$")

TODAY = timezone.now().astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
MONTH_START = TODAY.replace(day=1)
PREV_MONTH = (MONTH_START - dt.timedelta(days=1)).replace(day=1)


def _event(tenant, price, *, at, model, prompt, completion, cached=0, key_id=None, status="ok", priced=True):
    """A usage event as the gateway's shipper stores it: cost = tokens × the price version's rates."""
    cost = prompt * price.input_nanos + completion * price.output_nanos if priced else 0
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, api_key_id=key_id, public_model=model,
        price_id=price.pk if priced else None, prompt_tokens=prompt, completion_tokens=completion,
        cached_tokens=cached, cost_nanos=cost, status=status, http_status=200 if status == "ok" else 500,
        started_at=at, finished_at=at, received_at=timezone.now() - dt.timedelta(minutes=5),
        ttft_ms=50.0, tpot_ms=10.0, deployment_id=7, version_id=3,
    )  # fmt: skip


def _price_since(*, public_model, input_per_million, output_per_million, actor, effective_from):
    """A price version published back then. ``price_set`` refuses to backdate a new price (re-pricing
    the past is its own action), so history older than now is written as the row it left."""
    return Price.objects.create(
        public_model=public_model, input_per_million=input_per_million,
        output_per_million=output_per_million, effective_from=effective_from, source="manual",
        created_by=actor,
    )  # fmt: skip


@pytest.fixture
def usage(tenant, other_tenant, admin_user):
    old = _price_since(
        public_model="sim-llama", input_per_million=Decimal("0.150"), output_per_million=Decimal("0.600"),
        actor=admin_user, effective_from=PREV_MONTH - dt.timedelta(days=30),
    )  # fmt: skip
    new = _price_since(
        public_model="sim-llama", input_per_million=Decimal("0.200"), output_per_million=Decimal("0.800"),
        actor=admin_user, effective_from=TODAY - dt.timedelta(days=1),
    )  # fmt: skip
    qwen = _price_since(
        public_model="sim-qwen", input_per_million=Decimal("1.250"), output_per_million=Decimal("5.000"),
        actor=admin_user, effective_from=PREV_MONTH - dt.timedelta(days=30),
    )  # fmt: skip
    events = [
        _event(tenant, old, at=PREV_MONTH + dt.timedelta(days=3, hours=2), model="sim-llama", prompt=12_345, completion=678),
        _event(tenant, old, at=TODAY - dt.timedelta(days=2, hours=-5), model="sim-llama", prompt=1_000, completion=250, cached=400, key_id=11),
        _event(tenant, old, at=TODAY - dt.timedelta(days=1, hours=-1), model="sim-llama", prompt=7, completion=3, key_id=11),
        # the same day at the new price version: a second pair of rows, each at its own unit price
        _event(tenant, new, at=TODAY - dt.timedelta(days=1, hours=-9), model="sim-llama", prompt=9_999, completion=1, key_id=11),
        _event(tenant, qwen, at=TODAY + dt.timedelta(hours=1), model="sim-qwen", prompt=321, completion=4_567),
        _event(tenant, qwen, at=TODAY + dt.timedelta(hours=2), model="sim-qwen", prompt=0, completion=0, status="error"),
        _event(other_tenant, qwen, at=TODAY, model="sim-qwen", prompt=5, completion=5),
    ]  # fmt: skip
    # A re-pricing of last month (a billing period already closed) and one of this month.
    reprice_record(
        public_model="sim-llama", period_start=PREV_MONTH, period_end=MONTH_START, price=new,
        reason="rate card corrected", actor=admin_user,
    )  # fmt: skip
    reprice_record(
        public_model="sim-qwen", period_start=TODAY, period_end=TODAY + dt.timedelta(days=1),
        price=price_set(public_model="sim-qwen", input_per_million=Decimal("1.000"),
                        output_per_million=Decimal("4.000"), actor=admin_user, effective_from=TODAY + dt.timedelta(days=9)),
        reason="launch discount", actor=admin_user,
    )  # fmt: skip
    usage_rollup_run(lag_seconds=0)
    return {"events": [e for e in events if e.tenant_id == tenant.pk], "prices": (old, new, qwen)}


def export(client, tenant, since, until) -> tuple[list[str], list[dict]]:
    r = client.get(
        reverse("billing:tenant_cost", args=[tenant.slug]),
        {"format": "focus", "since": since.date().isoformat(), "until": until.date().isoformat()},
    )
    assert r.status_code == 200
    text = (b"".join(r.streaming_content) if r.streaming else r.content).decode()
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    # FOCUS's CSV convention: an empty field is a null.
    rows = [{c: (v if v != "" else None) for c, v in zip(header, line, strict=True)} for line in reader]
    return header, rows


@pytest.fixture
def focus(member_client, tenant, usage):
    return export(member_client, tenant, PREV_MONTH, TODAY + dt.timedelta(days=2))


def _usage(rows):
    return [r for r in rows if r["ChargeCategory"] == "Usage" and r["ChargeClass"] != "Correction"]


# --- attributes ------------------------------------------------------------------------------------


def test_ColumnHandling_custom_columns_are_x_prefixed(focus):
    """ColumnHandling: "Custom columns MUST be prefixed with a consistent `x_` prefix to identify them as
    external, custom columns"; "Column IDs MUST be alphanumeric with no special characters"."""
    header, _ = focus
    custom = [c for c in header if c not in SPEC_COLUMNS]
    assert custom and all(c.startswith("x_") for c in custom), custom
    assert all(PASCAL_RE.match(c) for c in header if c in SPEC_COLUMNS)
    # "Custom columns SHOULD be listed after all FOCUS columns and SHOULD NOT be intermixed."
    assert header.index(custom[0]) == len(header) - len(custom)


def test_DateTimeFormat_is_utc_with_Z(focus):
    """DateTimeFormat: "Values providing information about a specific moment in time MUST be represented
    in the extended ISO 8601 format with UTC offset ('YYYY-MM-DDTHH:mm:ssZ')"."""
    _, rows = focus
    for r in rows:
        for c in DATETIME_COLUMNS:
            assert DATETIME_RE.match(r[c]), (c, r[c])
            dt.datetime.strptime(r[c], "%Y-%m-%dT%H:%M:%SZ")  # a real date and time


def test_NumericFormat_of_every_decimal_column(focus):
    """NumericFormat: "Numeric values MUST be expressed as an integer value, a decimal value, or a value
    expressed in scientific notation"; "MUST NOT contain qualifiers or additional characters"."""
    _, rows = focus
    for r in rows:
        for c in DECIMAL_COLUMNS:
            if r[c] is not None:
                assert NUMERIC_RE.match(r[c]), (c, r[c])


def test_KeyValueFormat_of_tags_and_sku_price_details(focus):
    """KeyValueFormat: "Key-Value Format columns MUST contain a serialized JSON string, consistent with
    the ECMA 404 definition of an object"; "Values in a key-value pair MUST NOT be an object or an array"."""
    _, rows = focus
    seen = 0
    for r in rows:
        for c in ("Tags", "SkuPriceDetails"):
            if r[c] is not None:
                obj = json.loads(r[c])
                assert isinstance(obj, dict)
                assert all(v is None or isinstance(v, str | int | float | bool) for v in obj.values())
                seen += 1
    assert seen


def test_UnitFormat_of_pricing_and_consumed_units(focus):
    """UnitFormat: "If a unit quantity or time interval is used, the unit quantity or time interval MUST
    be expressed as a whole number" ("1000 Tokens"); PricingUnit/ConsumedUnit "SHOULD conform to
    UnitFormat requirements"."""
    _, rows = focus
    units = {r[c] for r in rows for c in ("PricingUnit", "ConsumedUnit") if r[c] is not None}
    assert units
    for u in units:
        assert UNIT_RE.match(u), u
        assert "M " not in u and "1M" not in u  # "1M Tokens" is not a whole-number quantity


def test_CurrencyFormat_BillingCurrency(focus):
    """CurrencyFormat: "MUST be represented as a three-letter alphabetic code as dictated in ... ISO
    4217:2015"; BillingCurrency "MUST be expressed in national currency"."""
    _, rows = focus
    assert {r["BillingCurrency"] for r in rows} == {"USD"}


def test_NullHandling_no_placeholders(focus):
    """NullHandling: "Columns MUST NOT use empty strings or placeholder values such as 0 for numeric
    columns or "Not Applicable" for string columns to represent a null"."""
    _, rows = focus
    for r in rows:
        for c, v in r.items():
            assert v is None or (v.strip() and v not in ("Not Applicable", "N/A", "null", "None")), (c, v)


# --- columns ---------------------------------------------------------------------------------------


def test_mandatory_columns_are_present(focus):
    """Every Mandatory column: "<Column> MUST be present in a FOCUS dataset"."""
    header, _ = focus
    assert [c for c in MANDATORY if c not in header] == []


def test_conditional_columns_that_apply_are_present(focus):
    """SkuId, SkuPriceId, ListUnitPrice ...: "MUST be present ... when the provider supports unit pricing
    concepts and publishes price lists"; ConsumedQuantity "when the provider supports the measurement of
    usage"; SubAccountId "when the provider supports a sub account construct"."""
    header, _ = focus
    assert [c for c in CONDITIONAL_THAT_APPLY if c not in header] == []


def test_not_nullable_columns_are_never_null(focus):
    """ "<Column> MUST NOT be null" for every column whose constraints say Allows nulls: False."""
    header, rows = focus
    assert rows
    for r in rows:
        assert [c for c in NOT_NULL if c in header and r[c] is None] == [], r


def test_ChargeCategory_allowed_values(focus):
    """ChargeCategory: "ChargeCategory MUST be one of the allowed values"."""
    _, rows = focus
    assert {r["ChargeCategory"] for r in rows} <= CHARGE_CATEGORIES


def test_ChargeClass_correction_of_a_previous_billing_period(focus):
    """ChargeClass: "MUST NOT be null when the row represents a correction to a previously invoiced
    billing period"; "MUST be null when the row does not represent a correction or when it represents a
    correction within the current billing period"; "MUST be "Correction" when ChargeClass is not null"."""
    _, rows = focus
    assert {r["ChargeClass"] for r in rows} == {None, "Correction"}
    for r in rows:
        if r["x_RepriceId"] is None:
            assert r["ChargeClass"] is None
        elif r["ChargePeriodStart"] < r["BillingPeriodStart"]:
            assert r["ChargeClass"] == "Correction", r
        else:
            assert r["ChargeClass"] is None, r


def test_ChargeFrequency_allowed_values(focus):
    """ChargeFrequency: "MUST be one of the allowed values"; "MUST NOT be "Usage-Based" when ChargeCategory
    is "Purchase"."""
    _, rows = focus
    assert {r["ChargeFrequency"] for r in rows} <= CHARGE_FREQUENCIES
    assert not [
        r for r in rows if r["ChargeCategory"] == "Purchase" and r["ChargeFrequency"] == "Usage-Based"
    ]


def test_periods_are_inclusive_start_exclusive_end(focus):
    """BillingPeriodStart "MUST be the inclusive start bound", BillingPeriodEnd "the exclusive end bound";
    ChargePeriodStart/End likewise for the charge."""
    _, rows = focus
    for r in rows:
        assert r["BillingPeriodStart"] < r["BillingPeriodEnd"]
        assert r["ChargePeriodStart"] < r["ChargePeriodEnd"]
        if r["ChargeClass"] is None:
            assert r["BillingPeriodStart"] <= r["ChargePeriodStart"] < r["BillingPeriodEnd"]


@pytest.mark.parametrize(
    "unit_price,cost", [("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")]
)
def test_unit_price_times_pricing_quantity_is_the_cost(focus, unit_price, cost):
    """ListCost/ContractedCost: "The product of ListUnitPrice and PricingQuantity MUST match the ListCost
    when ListUnitPrice is not null, PricingQuantity is not null, and ChargeClass is not "Correction"."""
    _, rows = focus
    checked = 0
    for r in rows:
        if (
            r[unit_price] is not None
            and r["PricingQuantity"] is not None
            and r["ChargeClass"] != "Correction"
        ):
            assert Decimal(r[unit_price]) * Decimal(r["PricingQuantity"]) == Decimal(r[cost]), r
            checked += 1
    assert checked >= 8


@pytest.mark.parametrize(
    "column",
    ["ListUnitPrice", "ContractedUnitPrice", "PricingQuantity", "SkuId", "SkuPriceId", "PricingCategory"],
)
def test_not_null_on_usage_rows_that_are_not_corrections(focus, column):
    """ListUnitPrice, ContractedUnitPrice, PricingQuantity, SkuId, SkuPriceId, PricingCategory: "MUST NOT
    be null when ChargeCategory is "Usage" or "Purchase" and ChargeClass is not "Correction"."""
    _, rows = focus
    assert [r for r in _usage(rows) if r[column] is None] == []


def test_unit_prices_are_non_negative(focus):
    """ListUnitPrice/ContractedUnitPrice: "MUST be a non-negative decimal value"."""
    _, rows = focus
    for r in rows:
        for c in ("ListUnitPrice", "ContractedUnitPrice"):
            assert r[c] is None or Decimal(r[c]) >= 0


def test_PricingCategory_allowed_values(focus):
    """PricingCategory: "MUST be one of the allowed values"."""
    _, rows = focus
    assert {r["PricingCategory"] for r in rows if r["PricingCategory"]} <= PRICING_CATEGORIES


def test_ConsumedQuantity_nullability(focus):
    """ConsumedQuantity: "MUST be null when ChargeCategory is not "Usage""; "MUST NOT be null when
    ChargeClass is not "Correction"" (for Usage); ConsumedUnit "MUST be null when ConsumedQuantity is null"
    and "MUST NOT be null when ConsumedQuantity is not null"."""
    _, rows = focus
    for r in rows:
        if r["ChargeCategory"] != "Usage":
            assert r["ConsumedQuantity"] is None
        elif r["ChargeClass"] != "Correction":
            assert r["ConsumedQuantity"] is not None
        assert (r["ConsumedUnit"] is None) == (r["ConsumedQuantity"] is None)


def test_PricingUnit_nullability(focus):
    """PricingUnit: "MUST be null when PricingQuantity is null"; "MUST NOT be null when PricingQuantity is
    not null"."""
    _, rows = focus
    for r in rows:
        assert (r["PricingUnit"] is None) == (r["PricingQuantity"] is None)


def test_costs_match_billed_cost_when_there_is_no_unit_price(focus):
    """ListCost/ContractedCost: "ListCost of a charge unrelated to other charges ... MUST match the
    BilledCost" when the unit price is null; EffectiveCost likewise when not Usage or Purchase."""
    _, rows = focus
    checked = [r for r in rows if r["ListUnitPrice"] is None]
    assert checked  # the re-pricing rows
    for r in checked:
        assert r["ListCost"] == r["ContractedCost"] == r["EffectiveCost"] == r["BilledCost"]


def test_SkuPriceId_has_one_parent_SkuId(focus):
    """SkuPriceId: "MUST have one and only one parent SkuId"; SkuMeter "MUST be null when SkuId is null";
    SkuPriceDetails "MUST be null when SkuPriceId is null"."""
    _, rows = focus
    parents: dict[str, set] = {}
    for r in rows:
        if r["SkuPriceId"] is not None:
            parents.setdefault(r["SkuPriceId"], set()).add(r["SkuId"])
        if r["SkuId"] is None:
            assert r["SkuMeter"] is None
        if r["SkuPriceId"] is None:
            assert r["SkuPriceDetails"] is None
    assert parents and all(len(p) == 1 and None not in p for p in parents.values())


def test_SkuPriceDetails_keys(focus):
    """SkuPriceDetails: "Property key MUST begin with the string "x_" unless it is a FOCUS-defined
    property"."""
    _, rows = focus
    for r in rows:
        if r["SkuPriceDetails"]:
            assert all(k.startswith("x_") for k in json.loads(r["SkuPriceDetails"]))


def test_ServiceCategory_and_subcategory(focus):
    """ServiceCategory: "MUST be one of the allowed values"; ServiceSubcategory "MUST have one and only
    one parent ServiceCategory as specified in the allowed values"."""
    _, rows = focus
    for r in rows:
        assert r["ServiceCategory"] in SERVICE_CATEGORIES
        if r["ServiceCategory"] == "AI and Machine Learning":
            assert r["ServiceSubcategory"] in AI_SUBCATEGORIES


def test_resource_and_sub_account_columns(focus):
    """ResourceType: "MUST be null when ResourceId is null" / "MUST NOT be null when ResourceId is not
    null"; ResourceName "MUST NOT duplicate ResourceId when the resource ... only has a system-generated
    ResourceId"; SubAccountName "MUST NOT be null when SubAccountId is not null"."""
    _, rows = focus
    for r in rows:
        assert (r["ResourceType"] is None) == (r["ResourceId"] is None)
        assert r["ResourceName"] != r["ResourceId"]
        assert (r["SubAccountName"] is None) == (r["SubAccountId"] is None)
    assert {r["SubAccountId"] for r in rows} == {"acme"}  # only the tenant's charges


def test_Tags_provider_keys_are_prefixed(focus):
    """Tags: "Provider-defined tag keys MUST be prefixed with a predetermined, provider-specified tag key
    prefix that is unique to each corresponding provider-specified tag scheme"."""
    _, rows = focus
    keys = {k for r in rows if r["Tags"] for k in json.loads(r["Tags"])}
    assert keys
    prefixes = {k.split("/", 1)[0] + "/" for k in keys}
    assert len(prefixes) == 1 and next(iter(prefixes)).startswith("x_")


def test_InvoiceId_null_without_an_invoice(focus):
    """InvoiceId: "MUST be null when the charge is not associated either with an invoice or with a
    pre-generated provisional invoice" (the platform issues none)."""
    _, rows = focus
    assert {r["InvoiceId"] for r in rows} == {None}


# --- the figures, against what was billed and published --------------------------------------------


def test_one_row_per_charge_and_sku_at_the_published_unit_prices(focus, usage):
    """Each Usage row is one SKU (input or output tokens) priced at exactly the price an admin published
    for it; the day with a price change has a pair of rows per price version."""
    _, rows = focus
    old, new, qwen = usage["prices"]
    published = {
        ("sim-llama", "Input Tokens", old.pk): "0.150", ("sim-llama", "Output Tokens", old.pk): "0.600",
        ("sim-llama", "Input Tokens", new.pk): "0.200", ("sim-llama", "Output Tokens", new.pk): "0.800",
        ("sim-qwen", "Input Tokens", qwen.pk): "1.250", ("sim-qwen", "Output Tokens", qwen.pk): "5.000",
    }  # fmt: skip
    seen = set()
    for r in _usage(rows):
        k = (r["ResourceName"], r["SkuMeter"], int(r["x_PriceVersionId"]))
        assert Decimal(r["ListUnitPrice"]) == Decimal(published[k]), r
        assert r["PricingUnit"] == "1000000 Tokens" and r["ConsumedUnit"] == "Tokens"
        seen.add(k)
    assert seen == set(published)
    day = (TODAY - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    llama_that_day = [
        r for r in _usage(rows) if r["ChargePeriodStart"] == day and r["ResourceName"] == "sim-llama"
    ]
    assert len(llama_that_day) == 4


def test_usage_totals_match_the_events(focus, usage):
    """Tokens and billed cost of the Usage rows add up to the usage events', to the nano-dollar."""
    _, rows = focus
    events = usage["events"]
    use = _usage(rows)
    assert sum(Decimal(r["BilledCost"]) for r in use) == sum(Decimal(e.cost_nanos) for e in events) / 10**9
    assert sum(int(r["ConsumedQuantity"]) for r in use if r["SkuMeter"] == "Input Tokens") == sum(
        e.prompt_tokens for e in events
    )
    assert sum(int(r["ConsumedQuantity"]) for r in use if r["SkuMeter"] == "Output Tokens") == sum(
        e.completion_tokens for e in events
    )
    assert sum(int(r["x_Requests"]) for r in use if r["x_Requests"]) == len(events)
    assert sum(int(r["x_CachedInputTokens"]) for r in use if r["x_CachedInputTokens"]) == 400


def test_reprice_rows_carry_the_recorded_difference(focus, usage, tenant):
    """The closed period's re-pricing is a Usage correction of what the re-pricing recorded for the tenant."""
    _, rows = focus
    corrections = [r for r in rows if r["ChargeClass"] == "Correction"]
    assert len(corrections) == 1
    _, new, _ = usage["prices"]
    # What the events of the re-priced month cost at the new price, minus what they were billed.
    delta = sum(
        e.prompt_tokens * new.input_nanos + e.completion_tokens * new.output_nanos - e.cost_nanos
        for e in usage["events"]
        if PREV_MONTH <= e.started_at < MONTH_START and e.public_model == "sim-llama"
    )
    assert delta
    assert Decimal(corrections[0]["BilledCost"]) == Decimal(delta) / 10**9
    assert corrections[0]["ChargeCategory"] == "Usage"
    in_period = [r for r in rows if r["x_RepriceId"] and r["ChargeClass"] is None]
    assert len(in_period) == 1 and in_period[0]["ChargeCategory"] == "Adjustment"
    assert Decimal(in_period[0]["BilledCost"]) < 0  # the launch discount is a credit


def test_cost_without_a_price_version_is_an_adjustment_not_a_unit_price(member_client, tenant, admin_user):
    """Usage billed with no price version recorded cannot be explained by a published unit price: it is an
    Adjustment row for the amount, and the Usage rows keep unit price × quantity = cost."""
    p = price_set(
        public_model="legacy",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        actor=admin_user,
    )
    ev = _event(tenant, p, at=TODAY + dt.timedelta(hours=1), model="legacy", prompt=100, completion=50)
    UsageEvent.objects.filter(pk=ev.pk).update(price_id=None)
    usage_rollup_run(lag_seconds=0)
    _, rows = export(member_client, tenant, TODAY, TODAY + dt.timedelta(days=1))
    adj = [r for r in rows if r["ChargeCategory"] == "Adjustment"]
    assert len(adj) == 1 and Decimal(adj[0]["BilledCost"]) == Decimal(ev.cost_nanos) / 10**9
    assert adj[0]["ConsumedQuantity"] is None and adj[0]["ListUnitPrice"] is None


# --- bad input and size ----------------------------------------------------------------------------


def test_export_of_a_period_without_usage_is_a_valid_file_with_a_header(member_client, tenant):
    header, rows = export(
        member_client, tenant, TODAY - dt.timedelta(days=400), TODAY - dt.timedelta(days=399)
    )
    assert rows == []
    assert [c for c in MANDATORY if c not in header] == []


@pytest.mark.slow  # 40,000 rows under tracemalloc: about 50 s on a 2-core host
def test_a_large_export_streams_in_bounded_chunks(member_client, tenant):
    """40,000 rows of FOCUS come out of a StreamingHttpResponse in chunks, and consuming it never holds
    anything near the whole file in memory."""
    rows = [
        UsageRollup(
            granularity="day",
            bucket_start=TODAY - dt.timedelta(days=i % 20),
            tenant=tenant,
            public_model=f"m{i % 7}",
            api_key_id=i,
            prompt_tokens=1000 + i,
            completion_tokens=10 + i,
        )  # fmt: skip
        for i in range(20_000)
    ]
    UsageRollup.objects.bulk_create(rows, batch_size=5000)
    r = member_client.get(
        reverse("billing:tenant_cost", args=[tenant.slug]),
        {"format": "focus", "since": (TODAY - dt.timedelta(days=30)).date().isoformat()},
    )
    assert r.streaming
    tracemalloc.start()
    try:
        total = chunks = biggest = 0
        lines = 0
        for chunk in r.streaming_content:
            chunks += 1
            total += len(chunk)
            biggest = max(biggest, len(chunk))
            lines += chunk.count(b"\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == 1 + 40_000
    assert chunks >= 40
    assert biggest < total / 20
    assert peak < total / 4, (peak, total)  # the whole file never sits in memory


def test_SkuPriceId_references_the_published_price_list(focus, admin_client):
    """SkuPriceId: "MUST reference a SKU Price in a provider-supplied price list, enabling the lookup of
    detailed information about the SKU Price"; "MUST support the lookup of the ListUnitPrice". The price
    list is the prices API; the row's price version and SkuPriceId find its unit price there."""
    _, rows = focus
    listed = {}
    for p in admin_client.get("/api/billing/prices/").json()["results"]:
        for sku in p["skus"]:
            listed[(p["id"], sku["sku_price_id"])] = sku
    use = _usage(rows)
    assert use
    for r in use:
        sku = listed[(int(r["x_PriceVersionId"]), r["SkuPriceId"])]
        assert Decimal(sku["list_unit_price"]) == Decimal(r["ListUnitPrice"])
        assert sku["pricing_unit"] == r["PricingUnit"] and sku["sku_id"] == r["SkuId"]
