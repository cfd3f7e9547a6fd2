"""GPU-hours from deployment history, their cost, the billed part and the idle remainder; the admin
cost page and the platform overview, by role."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.services.budgets import budget_set
from billing.services.rollups import usage_rollup_run
from catalog.services import gpu_cost_version_create
from deployments.constants import EventKind
from deployments.models import DeploymentEvent
from evaluations.selectors.gpu_costs import gpu_cost_summary
from tests.billing.test_rollups import make_event
from tests.deployments.factories import DeploymentFactory

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 11, 3, 20, 0, tzinfo=dt.UTC)


def status_event(dep, at, status, replicas=None):
    after = {"status": status}
    if replicas is not None:
        after["running_replicas"] = replicas
    e = DeploymentEvent.objects.create(deployment=dep, kind=EventKind.STATUS, after=after)
    DeploymentEvent.objects.filter(pk=e.pk).update(created_at=at)


@pytest.fixture
def dep(admin_user):
    d = DeploymentFactory(slug="llama-online", num_replicas=2)
    gpu_cost_version_create(gpu_type=d.gpu_type, basis="rent", rent_usd_per_hour=Decimal("2"),
                            target_utilization=Decimal("0.5"), actor=admin_user,
                            effective_from=T0 - dt.timedelta(days=30))  # fmt: skip
    status_event(d, T0 - dt.timedelta(hours=1), "PENDING")
    status_event(d, T0, "RUNNING", replicas=2)  # 2 replicas × 1 GPU
    status_event(d, T0 + dt.timedelta(hours=10), "STOPPED")
    return d


def test_gpu_hours_cost_billed_and_idle(dep, tenant):
    make_event(tenant, at=T0 + dt.timedelta(hours=1), cost=5 * 10**9, deployment_id=dep.pk)
    usage_rollup_run(lag_seconds=0)
    s = gpu_cost_summary(since=T0 - dt.timedelta(days=1), until=T0 + dt.timedelta(days=2))
    total = s["total"]
    assert total["gpu_hours"] == pytest.approx(20.0)  # 10 h × 2 GPUs
    assert total["cost_usd"] == Decimal(
        "40"
    )  # $2/GPU-h before the utilization divisor: idle is shown, not spread
    assert total["billed_usd"] == Decimal("5") and total["idle_usd"] == Decimal("35")
    by_day = {day.date().isoformat(): t for day, t in s["by_day"]}
    assert by_day["2026-11-03"]["gpu_hours"] == pytest.approx(8.0)  # 20:00–24:00
    assert by_day["2026-11-04"]["gpu_hours"] == pytest.approx(12.0)  # 00:00–06:00
    assert [p for p, _ in s["by_pool"]] == ["online"]


@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_gpu_cost_page_by_role(role_clients, role, status, dep):
    r = role_clients[role].get(reverse("cost:gpu_costs") + "?since=2026-11-01&until=2026-11-10")
    assert r.status_code == status
    if status == 200:
        html = r.content.decode()
        assert (
            "llama-online" in html
            and 'id="total-gpu-cost">$40.00<' in html
            and 'id="total-idle">$40.00<' in html
        )


def test_gpu_cost_page_bad_range(admin_client):
    r = admin_client.get(reverse("cost:gpu_costs") + "?since=2026-11-10&until=2026-11-01")
    assert r.status_code == 400 and "end date must be after the start date" in r.content.decode()


def test_platform_overview_for_admins_only(role_clients, tenant, admin_user):
    budget_set(
        tenant=tenant, amount_usd=Decimal("1"), period="monthly", soft_threshold_percents=[], actor=admin_user
    )
    now = dt.datetime.now(dt.UTC)
    make_event(tenant, at=now - dt.timedelta(minutes=5), cost=3 * 10**9, model="sim-llama")
    usage_rollup_run(lag_seconds=0)
    html = role_clients["admin"].get(reverse("home")).content.decode()
    assert "Platform overview" in html
    assert 'id="overview-spend">$3.00<' in html
    assert 'id="overview-at-risk">1<' in html and "past its cap" in html
    assert "sim-llama" in html and "Acme Search" in html
    assert "Platform overview" in role_clients["auditor"].get(reverse("home")).content.decode()
    assert "Platform overview" not in role_clients["member"].get(reverse("home")).content.decode()
