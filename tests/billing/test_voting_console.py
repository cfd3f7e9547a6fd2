"""Voting in the console (docs/voting.md, ADR 0041): an admin enables it on a route and gives a tenant
a monthly budget of samples; the gateways are told both (the tenant's with what Postgres recorded
this month, so a Redis that lost its counter starts from it); the usage page shows the samples each
vote spent and saved."""

from __future__ import annotations

import csv as csv_lib
import datetime as dt
import io
import json
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.selectors import events_for_object
from billing.models import TenantLimits, UsageEvent
from billing.services.gateway_config import tenancy_section_build
from billing.services.keys import tenant_limits_set
from deployments.models import ModelRoute
from deployments.selectors import routing_table
from snapshot.contract import parse_snapshot
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

pytestmark = pytest.mark.django_db
LIMITS = {"rpm_limit": 0, "tpm_limit": 0, "max_input_tokens": 0, "max_output_tokens": 0}


def _event(tenant, *, samples: int = 0, saved: int = 0, at: dt.datetime | None = None) -> UsageEvent:
    at = at or timezone.now() - dt.timedelta(minutes=1)
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, public_model="m", prompt_tokens=10, completion_tokens=5,
        cost_nanos=1000, status="ok", http_status=200, started_at=at, finished_at=at, received_at=at,
        vote_samples=samples, vote_samples_saved=saved,
    )  # fmt: skip


def test_an_admin_enables_voting_on_a_route_and_the_gateways_are_told(admin_client):
    route = RouteTargetFactory(deployment=DeploymentFactory(status="RUNNING"), route__public_name="m-v").route
    assert routing_table()["m-v"]["voting"] == "off"
    page = admin_client.get(reverse("deployments:route_edit", args=[route.pk])).content.decode()
    assert 'name="voting"' in page
    r = admin_client.post(
        reverse("deployments:route_edit", args=[route.pk]), {"public_name": "m-v", "voting": "n"}
    )
    assert r.status_code == 302
    assert routing_table()["m-v"]["voting"] == "n"
    assert any(
        e.after.get("voting") == "n"
        for e in events_for_object(object_type="deployments.modelroute", object_id=route.pk)
    )
    # Posted without the field (an older form): left as it is.
    admin_client.post(reverse("deployments:route_edit", args=[route.pk]), {"public_name": "m-v"})
    assert ModelRoute.objects.get(pk=route.pk).voting == "n"
    url = f"/api/deployments/routes/{route.pk}/"
    bad = admin_client.patch(url, data=json.dumps({"voting": "always"}), content_type="application/json")
    assert bad.status_code == 400 and "voting" in bad.json()
    ok = admin_client.patch(url, data=json.dumps({"voting": "field"}), content_type="application/json")
    assert ok.status_code == 200 and ok.json()["voting"] == "field"
    snap = parse_snapshot(json.dumps({"routes": routing_table()}))
    assert snap.routes["m-v"].voting == "field"


def test_a_tenants_monthly_samples_reach_the_gateways_with_this_months_spend(
    admin_client, tenant, admin_user
):
    assert tenancy_section_build()["tenants"][str(tenant.pk)]["vote"] is None  # no limit, nothing to seed
    budget = {"amount_usd": "100", "period": "monthly", "soft_threshold_percents": "", "hard_cap_percent": "",
              **LIMITS, "vote_samples_per_month": "500"}  # fmt: skip
    assert admin_client.post(reverse("billing:budget_edit", args=[tenant.slug]), budget).status_code == 302
    assert TenantLimits.objects.get(tenant=tenant).vote_samples_per_month == 500
    now = timezone.now()
    _event(tenant, samples=6, saved=10)
    _event(tenant, samples=4, saved=0)
    _event(tenant)  # not a vote
    last_month = now.replace(day=1) - dt.timedelta(days=2)
    _event(tenant, samples=99, at=last_month)  # another month's: not this month's spend
    vote = tenancy_section_build()["tenants"][str(tenant.pk)]["vote"]
    assert vote == {"samples_per_month": 500, "period_key": f"m{now:%Y-%m}", "spent": 10}
    info = parse_snapshot(json.dumps({"tenants": tenancy_section_build()["tenants"]})).tenants[tenant.pk]
    assert (info.vote_samples_per_month, info.vote_spent) == (500, 10)
    # Saving the limits without the field leaves it; a negative number is refused.
    tenant_limits_set(tenant=tenant, actor=admin_user, **LIMITS)
    assert TenantLimits.objects.get(tenant=tenant).vote_samples_per_month == 500
    api = reverse("api-limits-detail", args=[tenant.slug])
    r = admin_client.put(api, {**LIMITS, "vote_samples_per_month": -1}, content_type="application/json")
    assert r.status_code == 400 and "vote_samples_per_month" in r.json()
    r = admin_client.put(api, {**LIMITS, "vote_samples_per_month": 0}, content_type="application/json")
    assert r.status_code == 200 and tenancy_section_build()["tenants"][str(tenant.pk)]["vote"] is None


def test_the_usage_page_shows_samples_spent_and_saved(member_client, tenant):
    _event(tenant, samples=4, saved=12)
    _event(tenant, samples=16, saved=0)
    _event(tenant)
    r = member_client.get(reverse("billing:usage"))
    totals = r.context["totals"]
    assert (totals["votes"], totals["vote_samples"], totals["vote_samples_saved"]) == (2, 20, 12)
    assert totals["vote_saved_percent"] == pytest.approx(100 * 12 / 32)
    page = r.content.decode()
    assert "20</strong> samples spent" in page and "4/16" in page and "16/16" in page
    csv = b"".join(member_client.get(reverse("billing:usage"), {"format": "csv"}).streaming_content).decode()
    rows = list(csv_lib.DictReader(io.StringIO(csv)))
    assert sorted((row["vote_samples"], row["vote_samples_saved"]) for row in rows) == [
        ("0", "0"),
        ("16", "0"),
        ("4", "12"),
    ]
