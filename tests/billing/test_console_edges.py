"""The console at its edges (issue 25): forms that refuse absurd input with a form error, saves that
change nothing and record nothing, and figures that mean what they say."""

from __future__ import annotations

import datetime as dt
import html
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import ApiKey, Budget

pytestmark = pytest.mark.django_db


# --- API keys: a past expiry is a form error on the styled page ------------------------------------


def test_key_form_answers_a_past_expiry_with_a_form_error_on_the_full_page(tenant_admin_client, tenant):
    past = (timezone.now() - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    r = tenant_admin_client.post(
        reverse("billing:key_create"),
        {"tenant": tenant.pk, "name": "late", "expires_at": past, "rpm_limit": 0, "tpm_limit": 0},
    )
    assert r.status_code == 400
    html = r.content.decode()
    assert "<nav" in html and "bootstrap.min.css" in html  # the whole page, not a bare fragment
    assert "The expiry must be in the future" in html
    assert not ApiKey.objects.filter(name="late").exists()


def test_key_form_date_picker_offers_no_past_minute(tenant_admin_client):
    html = tenant_admin_client.get(reverse("billing:key_list")).content.decode()
    today = timezone.now().strftime("%Y-%m-%d")
    assert f'min="{today}T' in html


# --- budgets: a save that changes nothing records nothing -------------------------------------------


BUDGET_FORM = {
    "amount_usd": "25.00",
    "period": "monthly",
    "soft_threshold_percents": "50,80,100",
    "hard_cap_percent": "100",
    "rpm_limit": "0",
    "tpm_limit": "0",
    "max_input_tokens": "0",
    "max_output_tokens": "0",
}


@pytest.mark.django_db(transaction=True)
def test_a_budget_save_that_changes_nothing_records_no_event(admin_client, tenant):
    # transaction=True: the raw-write trigger fires at COMMIT, which a plain test never reaches.
    url = reverse("billing:budget_edit", args=[tenant.slug])
    assert admin_client.post(url, BUDGET_FORM).status_code == 302
    first = Budget.objects.get(tenant=tenant).updated_at
    seq = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    assert admin_client.post(url, BUDGET_FORM).status_code == 302
    assert list(AuditEvent.objects.filter(seq__gt=seq).values_list("action", "actor")) == []
    assert Budget.objects.get(tenant=tenant).updated_at == first
    # A real change is still recorded, once, by the service.
    assert admin_client.post(url, {**BUDGET_FORM, "amount_usd": "30"}).status_code == 302
    assert list(AuditEvent.objects.filter(seq__gt=seq).values_list("action", flat=True)) == ["budget.update"]
    assert Budget.objects.get(tenant=tenant).amount_usd == Decimal("30")


# --- latency: TPOT is undefined for non-streamed answers -------------------------------------------


def test_non_streamed_requests_count_in_ttft_but_not_in_tpot(tenant):
    from billing.selectors.costs import latency_percentiles
    from billing.services.rollups import usage_rollup_run
    from tests.billing.test_rollups import make_event

    at = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=2)
    streamed = [make_event(tenant, at=at, ttft=200.0, tpot=30.0) for _ in range(5)]
    # What older gateways wrote for a unary answer: the whole body arrives at once, "TPOT" ~ 0.
    unary = [make_event(tenant, at=at, ttft=900.0, tpot=t) for t in (0.0, 0.01, 0.02, 0.0, 0.03)]
    type(streamed[0]).objects.filter(pk__in=[e.pk for e in streamed]).update(stream=True)
    assert not any(e.stream for e in unary)
    usage_rollup_run(lag_seconds=0)
    p = latency_percentiles(
        tenant_id=tenant.pk, since=at - dt.timedelta(days=1), until=at + dt.timedelta(days=1)
    )
    assert p["tpot_count"] == 5 and p["ttft_count"] == 10
    assert p["tpot"]["p50"] == pytest.approx(30.0, rel=0.02)  # not dragged to ~0 by the unary ones
    assert p["ttft"]["p95"] == pytest.approx(900.0, rel=0.02)


# --- bidirectional control characters in names ------------------------------------------------------

RLO = "\u202e"


def test_a_tenant_name_with_a_right_to_left_override_is_a_form_error(admin_client):
    r = admin_client.post(reverse("billing:tenant_create"), {"name": f"Acme {RLO}hcraeS", "is_active": "on"})
    assert r.status_code == 400
    assert "direction-control characters (U+202E RIGHT-TO-LEFT OVERRIDE)" in r.content.decode()
    assert RLO not in r.content.decode()  # the page echoing the input does not render it reversed either
    from billing.models import Tenant

    assert not Tenant.objects.filter(name__contains=RLO).exists()


@pytest.mark.parametrize("char", ["\u202e", "\u202d", "\u2067", "\u200f", "\u061c"])
def test_the_api_refuses_bidi_controls_in_tenant_and_key_names(admin_client, tenant, char):
    r = admin_client.post(
        "/api/billing/tenants/", {"name": f"Glo{char}bex", "slug": "globex2"}, content_type="application/json"
    )
    assert r.status_code == 400 and "name" in r.json()
    r = admin_client.patch(
        f"/api/billing/tenants/{tenant.slug}/", {"name": f"Acme{char}"}, content_type="application/json"
    )
    assert r.status_code == 400
    tenant.refresh_from_db()
    assert tenant.name == "Acme Search"
    r = admin_client.post(
        reverse("api-key-list"),
        {"tenant": tenant.slug, "name": f"app{char}"},
        content_type="application/json",
    )
    assert r.status_code == 400 and not ApiKey.objects.exists()


def test_an_old_row_with_a_bidi_override_renders_in_its_stored_order(admin_client, member_client, tenant):
    from billing.models import Tenant

    # Stored before the check (or by SQL): the pages must not show it reversed.
    Tenant.objects.filter(pk=tenant.pk).update(name=f"Acme {RLO}hcraeS")
    for client, url in [
        (admin_client, reverse("billing:tenant_list")),
        (admin_client, reverse("billing:budget_list")),
        (member_client, reverse("billing:tenant_cost", args=[tenant.slug])),
        (member_client, reverse("billing:tenant_detail", args=[tenant.slug])),
    ]:
        html = client.get(url).content.decode()
        assert "Acme hcraeS" in html, url
        assert not any(c in html for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"), url


# --- absurd values: a clear error, nothing changed --------------------------------------------------


@pytest.fixture
def route(db):
    from tests.deployments.factories import ModelRouteFactory

    return ModelRouteFactory(public_name="sim-llama")


def _price_count():
    from billing.models import Price

    return Price.objects.count()


@pytest.mark.parametrize(
    "data,field,message",
    [
        ({"public_model": "no-such-model"}, "public_model", "No route answers to 'no-such-model'"),
        ({"effective_from": "1999-01-01 00:00"}, "effective_from", "cannot start in the past"),
        ({"input_per_million": "10000.001"}, "input_per_million", "less than or equal to 10000"),
        ({"output_per_million": "99999999"}, "output_per_million", "less than or equal to 10000"),
    ],
)
def test_price_form_refuses_absurd_values_with_a_form_error(admin_client, route, data, field, message):
    base = {"public_model": "sim-llama", "input_per_million": "0.5", "output_per_million": "1.5"}
    r = admin_client.post(reverse("billing:price_create"), {**base, **data})
    assert r.status_code == 400
    assert message in " ".join(r.context["form"].errors[field])
    assert r.context["form"].errors[field][0][:20] in html.unescape(r.content.decode())  # shown on the page
    assert _price_count() == 0


@pytest.mark.parametrize(
    "data,field",
    [
        ({"public_model": "no-such-model"}, "public_model"),
        ({"effective_from": "1999-01-01T00:00:00Z"}, "effective_from"),
        ({"input_per_million": "10000.5"}, "input_per_million"),
    ],
)
def test_price_api_refuses_absurd_values_with_a_400(admin_client, route, data, field):
    base = {"public_model": "sim-llama", "input_per_million": "0.5", "output_per_million": "1.5"}
    r = admin_client.post(reverse("api-price-list"), {**base, **data}, content_type="application/json")
    assert r.status_code == 400 and field in r.json(), r.content
    assert _price_count() == 0


def test_price_services_refuse_backdating_and_absurd_prices(admin_user):
    from django.core.exceptions import ValidationError

    from billing.services.prices import price_publish, price_set

    with pytest.raises(ValidationError) as exc:
        price_set(public_model="m", input_per_million=Decimal("1"), output_per_million=Decimal("1"),
                  actor=admin_user, effective_from=dt.datetime(1999, 1, 1, tzinfo=dt.UTC))  # fmt: skip
    assert "Re-price" in str(exc.value.message_dict["effective_from"])
    with pytest.raises(ValidationError):
        price_publish(public_model="m", input_per_million=Decimal("20000"), output_per_million=Decimal("1"),
                      actor=admin_user, provenance={"formula": "x"})  # fmt: skip
    # A new price may start now (the form's few minutes) or later.
    price_set(public_model="m", input_per_million=Decimal("1"), output_per_million=Decimal("1"), actor=admin_user,
              effective_from=timezone.now() - dt.timedelta(minutes=1))  # fmt: skip
    assert _price_count() == 1


def test_budget_hard_cap_percent_is_bounded_in_form_api_and_service(admin_client, admin_user, tenant):
    from django.core.exceptions import ValidationError

    from billing.services.budgets import budget_set

    url = reverse("billing:budget_edit", args=[tenant.slug])
    r = admin_client.post(url, {**BUDGET_FORM, "hard_cap_percent": "100000"})
    assert r.status_code == 400 and "less than or equal to 1000" in r.content.decode()
    r = admin_client.put(
        reverse("api-budget-detail", args=[tenant.slug]),
        {"amount_usd": "25", "hard_cap_percent": 100000},
        content_type="application/json",
    )
    assert r.status_code == 400 and "hard_cap_percent" in r.json()
    with pytest.raises(ValidationError) as exc:
        budget_set(tenant=tenant, amount_usd=Decimal("25"), hard_cap_percent=100000, actor=admin_user)
    assert "hard_cap_percent" in exc.value.message_dict
    with pytest.raises(ValidationError) as exc:
        budget_set(tenant=tenant, amount_usd=Decimal("25"), actor=admin_user, reason="x" * 200_000)
    assert "reason" in exc.value.message_dict
    assert not Budget.objects.filter(tenant=tenant).exists()


def test_a_200000_character_reason_is_refused_by_the_api_and_the_service(admin_client, admin_user):
    from django.core.exceptions import ValidationError

    from catalog.services import model_version_transition
    from tests.factories import ModelVersionFactory

    version = ModelVersionFactory()
    before = (version.lifecycle, version.gate_override_reason)
    r = admin_client.post(
        f"/api/catalog/versions/{version.pk}/transition/",
        {"to": "approved", "override": True, "reason": "x" * 200_000},
        content_type="application/json",
    )
    assert r.status_code == 400 and "reason" in r.json(), r.content[:300]
    with pytest.raises(ValidationError) as exc:
        model_version_transition(
            version=version, to="approved", actor=admin_user, override=True, reason="y" * 200_000
        )
    assert "reason" in exc.value.message_dict
    version.refresh_from_db()
    assert (version.lifecycle, version.gate_override_reason) == before
    assert not AuditEvent.objects.filter(action="model_version.gate_override").exists()


# --- cross-tenant writes answered 404 are recorded ---------------------------------------------------


def _security_events():
    return list(AuditEvent.objects.filter(action="security.cross_tenant_write").order_by("seq"))


def _same_404(client, url_name: str, hidden_id: int, missing_id: int):
    """What the attacker sees for another tenant's object equals what a missing one gives."""
    hidden_url, missing_url = reverse(url_name, args=[hidden_id]), reverse(url_name, args=[missing_id])
    hidden, missing = client.post(hidden_url), client.post(missing_url)
    assert hidden.status_code == missing.status_code == 404

    def page(response, url: str) -> bytes:
        # The console's 404 page carries a per-request masked CSRF token (htmx's header, the log-out form) and
        # nonce: they differ between any two responses and say nothing about the object.
        body = response.content.replace(url.encode(), b"URL")
        body = re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"CSRF", body)
        body = re.sub(rb'"X-CSRFToken": "[^"]*"', b"CSRF", body)
        return re.sub(rb'nonce="[^"]*"', b"NONCE", body)

    assert page(hidden, hidden_url) == page(missing, missing_url)


def test_revoking_another_tenants_key_is_a_404_and_a_security_event(
    outsider_client, admin_user, tenant, other_tenant
):
    from billing.services.keys import api_key_create

    theirs, _ = api_key_create(tenant=tenant, name="acme-app", actor=admin_user)
    missing = theirs.pk + 1000
    _same_404(outsider_client, "billing:key_revoke", theirs.pk, missing)
    _same_404(outsider_client, "api-key-revoke", theirs.pk, missing)
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    events = _security_events()
    assert [(e.actor, e.object_type, e.object_id, e.tenant_id) for e in events] == [
        ("outsider", "billing.apikey", str(theirs.pk), tenant.pk)
    ] * 2  # the missing ids are ordinary misses, not recorded
    assert events[0].evidence["path"] == reverse("billing:key_revoke", args=[theirs.pk])
    assert events[1].evidence["path"] == reverse("api-key-revoke", args=[theirs.pk])
    assert events[0].evidence["method"] == "POST"


def test_writes_to_another_tenants_webhook_notification_and_keys_are_recorded(
    outsider_client, outsider_user, admin_user, tenant
):
    from notify.models import Notification

    r = outsider_client.post(
        reverse("notify:tenant_webhook", args=[tenant.slug]), {"url": "https://x.example/"}
    )
    assert r.status_code == 404
    note = Notification.objects.create(
        audience="tenant", tenant=tenant, kind="budget_threshold", title="t", body="b"
    )
    assert outsider_client.post(reverse("notify:notification_read", args=[note.pk])).status_code == 404
    r = outsider_client.post(
        reverse("api-key-list"), {"tenant": tenant.slug, "name": "mine now"}, content_type="application/json"
    )
    assert r.status_code == 400 and r.json() == {"tenant": ["No such tenant."]}
    assert [(e.actor, e.object_type, e.tenant_id) for e in _security_events()] == [
        ("outsider", "billing.tenant", tenant.pk),
        ("outsider", "notify.notification", tenant.pk),
        ("outsider", "billing.tenant", tenant.pk),
    ]
    assert not note.read_by.exists() and not ApiKey.objects.exists()
    # Reads answered 404 are ordinary misses: nothing recorded.
    before = len(_security_events())
    assert outsider_client.get(reverse("billing:tenant_cost", args=[tenant.slug])).status_code == 404
    assert len(_security_events()) == before


# --- the cap: the page agrees with the gateway's refusals, and refusals notify -----------------------


def _admit(prefix: str, tenant_id: int, period_key: str, *, hold: int, cap: int, seed: int) -> bool:
    """One admission through the gateway's own ADMIT script on the real Redis (no rate limits)."""
    import asyncio

    from django.conf import settings

    from gateway.limits import Limiter
    from gateway.redisfast import FastRedis

    async def go() -> bool:
        r = FastRedis(settings.REDIS_URL)
        try:
            adm = await Limiter(r, prefix).admit(
                key_id=1, tenant_id=tenant_id, key_rpm=0, key_tpm=0, tenant_rpm=0, tenant_tpm=0, tokens=10,
                hold_nanos=hold, cap_nanos=cap, seed_spent_nanos=seed, period_key=period_key, budget_ttl_s=3600,
            )  # fmt: skip
            return adm.admitted
        finally:
            r.close()

    return asyncio.run(go())


def test_at_the_cap_the_page_shows_the_gateways_refusals_and_admins_are_notified_once(
    settings, admin_user, member_client, tenant
):
    import re
    import uuid

    from billing.selectors.costs import budget_burndown
    from billing.selectors.spend import period_bounds
    from billing.services.budgets import budget_alerts_record, budget_set
    from billing.services.rollups import usage_rollup_run
    from notify.models import Notification
    from tests.billing.test_rollups import make_event

    settings.GATEWAY_KEY_PREFIX = prefix = f"test-{uuid.uuid4().hex[:8]}:"
    budget_set(tenant=tenant, amount_usd=Decimal("0.05"), hard_cap_percent=100, actor=admin_user)
    now = timezone.now()
    pkey, start, _end = period_bounds(period="monthly", at=now)
    spent = 30_000_000  # $0.03 of a $0.05 cap, settled and rolled up
    make_event(tenant, at=max(start, now - dt.timedelta(hours=1)), cost=spent)
    usage_rollup_run(lag_seconds=0)
    cap = 50_000_000

    # A request in flight holds $0.015: $0.005 of room is left, though the rollups see $0.02.
    assert _admit(prefix, tenant.pk, pkey, hold=15_000_000, cap=cap, seed=spent)
    b = budget_burndown(tenant=tenant)
    assert b["room_usd"] == Decimal("0.005") and b["refusing_since"] is None and not b["over_cap"]
    assert b["cap_at"] is None or b["cap_at"] > now
    assert budget_alerts_record() == 0 or not Notification.objects.filter(kind="budget_cap").exists()

    # The next request's worst case ($0.01) does not fit: the gateway refuses it.
    assert not _admit(prefix, tenant.pk, pkey, hold=10_000_000, cap=cap, seed=spent)
    b = budget_burndown(tenant=tenant)
    assert b["refusing_since"] is not None and b["refusing_since"] <= timezone.now()
    assert b["cap_at"] is None and b["over_cap"]
    html = member_client.get(reverse("billing:tenant_cost", args=[tenant.slug])).content.decode()
    cell = re.search(r'id="cap-at">(.*?)</td>', html).group(1)
    assert "the gateway refuses requests" in cell
    shown = dt.datetime.strptime(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", cell).group(0), "%Y-%m-%d %H:%M")
    assert shown.replace(tzinfo=dt.UTC) <= timezone.now()  # a time already past, never one ahead

    # Admins hear of it once per period, however often the sweep runs.
    budget_alerts_record()
    budget_alerts_record()
    notes = list(Notification.objects.filter(tenant=tenant, kind="budget_cap"))
    assert len(notes) == 1
    assert "requests refused" in notes[0].title and notes[0].payload["event"] == "budget.cap_reached"
    assert notes[0].payload["period"] == pkey

    # Raising the budget gives room again: the page no longer says the gateway refuses.
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        budget_set(tenant=tenant, amount_usd=Decimal("1.00"), hard_cap_percent=100, actor=admin_user)
    b = budget_burndown(tenant=tenant)
    assert b["refusing_since"] is None and not b["over_cap"]
    assert _admit(prefix, tenant.pk, pkey, hold=10_000_000, cap=1_000_000_000, seed=spent)
