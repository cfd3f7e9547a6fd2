"""Traffic classes in the console (docs/decisions/0035): who may give a key which class, what the
gateways are told, and the usage page by class.

Who can do what: a platform admin sets the highest class a tenant's keys may use (with its limits);
a tenant admin makes keys at or below it, never above (form and API); members and auditors set
nothing. The class a key publishes is never above its tenant's, even after the tenant's is lowered."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import ApiKey, TenantLimits, UsageEvent
from billing.services.gateway_config import key_class, tenancy_section_build
from billing.services.keys import api_key_create, tenant_limits_set

pytestmark = pytest.mark.django_db

LIMITS = {"rpm_limit": 0, "tpm_limit": 0, "max_input_tokens": 0, "max_output_tokens": 0}


def _event(tenant, cls: str, *, error_type: str = "", cost: int = 1000) -> UsageEvent:
    now = timezone.now() - dt.timedelta(minutes=1)
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, public_model="m", prompt_tokens=10, completion_tokens=5,
        cost_nanos=cost, status="ok" if not error_type else "error", error_type=error_type,
        http_status=200 if not error_type else 503, started_at=now, finished_at=now, received_at=now,
        traffic_class=cls,
    )  # fmt: skip


def test_a_keys_class_is_its_own_or_its_tenants_and_never_above_the_tenants():
    assert key_class("", "standard") == "standard"
    assert key_class("sheddable", "interactive") == "sheddable"
    assert key_class("interactive", "standard") == "standard"  # the tenant's was lowered since


def test_a_tenant_admin_cannot_make_a_key_above_the_tenants_class(tenant_admin_client, admin_client, tenant):
    url = reverse("billing:key_create")
    r = tenant_admin_client.post(url, {"tenant": tenant.pk, "name": "chat", "rpm_limit": 0, "tpm_limit": 0,
                                       "traffic_class": "interactive"})  # fmt: skip
    assert r.status_code == 400 and not ApiKey.objects.exists()
    assert "standard traffic at most" in r.context["form"].errors["traffic_class"][0]
    r = tenant_admin_client.post(url, {"tenant": tenant.pk, "name": "nightly", "rpm_limit": 0, "tpm_limit": 0,
                                       "traffic_class": "sheddable"})  # fmt: skip
    assert r.status_code == 200 and ApiKey.objects.get(name="nightly").traffic_class == "sheddable"
    # The platform admin raises the tenant's class with its limits; then the tenant admin may.
    budget = {"amount_usd": "100", "period": "monthly", "soft_threshold_percents": "", "hard_cap_percent": "",
              **LIMITS, "traffic_class": "interactive"}  # fmt: skip
    assert admin_client.post(reverse("billing:budget_edit", args=[tenant.slug]), budget).status_code == 302
    assert TenantLimits.objects.get(tenant=tenant).traffic_class == "interactive"
    r = tenant_admin_client.post(url, {"tenant": tenant.pk, "name": "chat", "rpm_limit": 0, "tpm_limit": 0,
                                       "traffic_class": "interactive"})  # fmt: skip
    assert r.status_code == 200
    page = tenant_admin_client.get(reverse("billing:key_list")).content.decode()
    assert "interactive" in page and "sheddable" in page


def test_the_api_keeps_the_same_ceiling_and_only_platform_admins_set_it(
    tenant_admin_client, admin_client, tenant
):
    keys, limits = reverse("api-key-list"), reverse("api-limits-detail", args=[tenant.slug])
    wants = {"tenant": tenant.slug, "name": "k", "traffic_class": "interactive"}
    r = tenant_admin_client.post(keys, wants, content_type="application/json")
    assert r.status_code == 400 and "traffic_class" in r.json()
    r = tenant_admin_client.put(
        limits, {**LIMITS, "traffic_class": "interactive"}, content_type="application/json"
    )
    assert r.status_code == 403
    r = admin_client.put(limits, {**LIMITS, "traffic_class": "urgent"}, content_type="application/json")
    assert r.status_code == 400 and "traffic_class" in r.json()
    r = admin_client.put(limits, {**LIMITS, "traffic_class": "interactive"}, content_type="application/json")
    assert r.status_code == 200 and r.json()["traffic_class"] == "interactive"
    r = tenant_admin_client.post(keys, wants, content_type="application/json")
    assert r.status_code == 201 and r.json()["traffic_class"] == "interactive"


def test_the_gateways_are_told_each_keys_class_and_a_lowered_tenant_lowers_its_keys(tenant, admin_user):
    tenant_limits_set(tenant=tenant, actor=admin_user, **LIMITS, traffic_class="interactive")
    chat, _ = api_key_create(tenant=tenant, name="chat", actor=admin_user, traffic_class="interactive")
    plain, _ = api_key_create(tenant=tenant, name="plain", actor=admin_user)
    batch, _ = api_key_create(tenant=tenant, name="batch", actor=admin_user, traffic_class="sheddable")
    classes = {k["id"]: k["class"] for k in tenancy_section_build()["keys"].values()}
    assert classes == {chat.pk: "interactive", plain.pk: "interactive", batch.pk: "sheddable"}
    tenant_limits_set(tenant=tenant, actor=admin_user, **LIMITS, traffic_class="standard")
    classes = {k["id"]: k["class"] for k in tenancy_section_build()["keys"].values()}
    assert classes == {chat.pk: "standard", plain.pk: "standard", batch.pk: "sheddable"}
    # Saving the limits without a class leaves it as it is.
    tenant_limits_set(tenant=tenant, actor=admin_user, **{**LIMITS, "rpm_limit": 5})
    assert TenantLimits.objects.get(tenant=tenant).traffic_class == "standard"


def test_the_usage_page_counts_and_filters_by_class_and_exports_it(member_client, tenant):
    for cls in ("interactive", "standard", "standard", "sheddable"):
        _event(tenant, cls)
    _event(tenant, "sheddable", error_type="shed_sheddable", cost=0)
    r = member_client.get(reverse("billing:usage"))
    rows = {c["traffic_class"]: (c["requests"], c["shed"]) for c in r.context["by_class"]}
    assert rows == {"interactive": (1, 0), "standard": (2, 0), "sheddable": (2, 1)}
    assert [c["traffic_class"] for c in r.context["by_class"]] == ["interactive", "standard", "sheddable"]
    assert "Shed under load" in r.content.decode()
    r = member_client.get(reverse("billing:usage"), {"traffic_class": "sheddable"})
    assert r.context["totals"]["requests"] == 2
    csv = b"".join(
        member_client.get(
            reverse("billing:usage"), {"format": "csv", "traffic_class": "standard"}
        ).streaming_content
    ).decode()
    lines = csv.strip().splitlines()
    assert (
        lines[0].endswith(",traffic_class")
        and len(lines) == 3
        and all(x.endswith(",standard") for x in lines[1:])
    )


def test_the_cost_page_splits_spend_by_class_from_the_rollups_and_focus_tags_it(member_client, tenant):
    """The rollups keep the class as a dimension (billing.services.rollups): the cost page's by-class
    table, read from them, equals a sum over the raw events, and each FOCUS row is tagged with it."""
    from django.db.models import Count, Q, Sum

    from billing.models import UsageRollup
    from billing.services.rollups import usage_rollup_batch

    for cls, cost in (("interactive", 7000), ("interactive", 3000), ("standard", 2500), ("sheddable", 900)):
        _event(tenant, cls, cost=cost)
    _event(tenant, "sheddable", error_type="shed_sheddable", cost=0)
    assert usage_rollup_batch(lag_seconds=0) == 5
    assert set(UsageRollup.objects.values_list("traffic_class", flat=True)) == {
        "interactive",
        "standard",
        "sheddable",
    }
    expected = {
        r["traffic_class"]: (r["n"], r["err"], r["cost"])
        for r in UsageEvent.objects.values("traffic_class").annotate(
            n=Count("id"), err=Count("id", filter=~Q(status="ok")), cost=Sum("cost_nanos")
        )
    }
    r = member_client.get(reverse("billing:tenant_cost", args=[tenant.slug]))
    assert r.status_code == 200
    got = {
        c["label"]: (c["requests"], c["errors"], int(c["cost_usd"] * 10**9)) for c in r.context["by_class"]
    }
    assert (
        got == expected == {"interactive": (2, 0, 10000), "standard": (1, 0, 2500), "sheddable": (2, 1, 900)}
    )
    assert [c["label"] for c in r.context["by_class"]] == ["interactive", "standard", "sheddable"]
    assert 'id="by-class"' in r.content.decode()
    focus_csv = b"".join(
        member_client.get(
            reverse("billing:tenant_cost", args=[tenant.slug]), {"format": "focus"}
        ).streaming_content
    ).decode()
    assert focus_csv.count("x_governor/traffic_class") >= 3 and '""sheddable""' in focus_csv
