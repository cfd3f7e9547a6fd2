"""Prices derived from capacity goodput: the formula, run selection, bad runs, review and publish, roles."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import Price, Reprice, UsageEvent
from billing.selectors.prices import price_for
from billing.services.prices import price_publish, price_set, reprice_record
from catalog.services import gpu_cost_version_create
from evaluations.services.pricing import price_derivation
from tests.deployments.factories import ModelRouteFactory, RouteTargetFactory
from tests.evaluations.factories import BenchmarkRunFactory, DeploymentFactory

pytestmark = pytest.mark.django_db
MODEL = "llama-8b-chat"


def results(*, total=2400.0, output=400.0, rate=4.0, capacity=True) -> dict:
    stage = {
        "stage": 1,
        "completed": 100,
        "input_tokens": 50_000,
        "output_tokens": 10_000,
        "e2e_ms": {"mean": 2000.0},
    }
    cap = {
        "stage": 1,
        "rate": rate,
        "request_goodput": rate,
        "token_goodput": output,
        "total_token_goodput": total,
    }
    if not capacity:
        cap = {
            "stage": None,
            "rate": None,
            "request_goodput": None,
            "token_goodput": None,
            "total_token_goodput": None,
        }
    return {"capacity": cap, "stages": [stage]}


@pytest.fixture
def deployment():
    dep = DeploymentFactory(slug="llama-a")
    route = ModelRouteFactory(public_name=MODEL)
    RouteTargetFactory(route=route, deployment=dep, weight=100)
    return dep


def make_run(dep, *, kind="measured", days_ago=1, **kw):
    run = BenchmarkRunFactory(
        deployment=dep, target_kind="deployment", kind=kind, results=results(**kw),
        capacity_rps=kw.get("rate", 4.0) if kw.get("capacity", True) else None,
        snapshot={"gpus": 2, "gpu_type": dep.gpu_type.name, "gpu_type_id": dep.gpu_type_id, "gpu_usd_per_hour": "2.49",
                  "model_version_id": dep.model_version_id, "tensor_parallel": 2},
        series=[{"t": 0.0, "stage": 1, "running": 8}, {"t": 1.0, "stage": 1, "running": 8}],
    )  # fmt: skip
    run.created_at = timezone.now() - dt.timedelta(days=days_ago)
    run.save(update_fields=["created_at"])
    return run


@pytest.fixture
def cost_version(deployment, admin_user):
    return gpu_cost_version_create(
        gpu_type=deployment.gpu_type, basis="rent", rent_usd_per_hour=Decimal("3"), actor=admin_user
    )


def test_derived_price_follows_the_formula_and_recovers_the_gpu_cost(deployment, cost_version):
    run = make_run(deployment)
    d = price_derivation(public_model=MODEL)
    assert d["derivable"] and d["label"] == "measured"
    c = d["components"][0]
    assert c["run_id"] == run.pk and c["gpu_cost_version_id"] == cost_version.pk
    assert c["usd_per_hour"] == 6.0  # 2 GPUs × $3
    assert c["blended_per_million"] == pytest.approx(6.0 / (2400 * 3600) * 1e6)
    f = c["split"]["f"]
    assert 0 < f < 1 and c["split"]["batch"] == 8 and "engine metrics" in c["split"]["batch_source"]
    # At capacity the input and output prices together bill exactly the cluster's hourly cost.
    revenue_per_hour = (c["input_per_million"] * 2000 + c["output_per_million"] * 400) * 3600 / 1e6
    assert revenue_per_hour == pytest.approx(6.0)
    assert c["output_per_million"] > c["input_per_million"]  # decode is the expensive phase
    assert d["input_per_million"] == Decimal(str(c["input_per_million"])).quantize(Decimal("0.001"))
    assert d["provenance"]["run_id"] == run.pk and d["provenance"]["gpu_cost_version_id"] == cost_version.pk
    assert "3600" in d["provenance"]["formula"]


def test_measured_is_preferred_over_a_newer_prediction(deployment, cost_version):
    measured = make_run(deployment, days_ago=5)
    make_run(deployment, kind="predicted", days_ago=0, total=9000.0, output=1000.0)
    assert price_derivation(public_model=MODEL)["provenance"]["run_id"] == measured.pk


def test_a_prediction_alone_is_allowed_and_labelled(deployment, cost_version):
    run = make_run(deployment, kind="predicted")
    d = price_derivation(public_model=MODEL)
    assert d["derivable"] and d["label"] == "predicted" and d["provenance"]["run_id"] == run.pk


def test_a_run_that_missed_the_sla_everywhere_gives_no_price(deployment, cost_version, admin_client):
    run = make_run(deployment, capacity=False)
    d = price_derivation(public_model=MODEL)
    assert not d["derivable"]
    assert f"#{run.pk} met the SLA at no stage" in d["why"] and "no price can be derived" in d["why"]
    html = admin_client.get(reverse("cost:derived_prices")).content.decode()
    assert "No price can be derived" in html and "Publish as new price version" not in html
    r = admin_client.post(reverse("cost:derived_price_publish"), {"public_model": MODEL, "fingerprint": "x"})
    assert r.status_code == 400 and "met the SLA at no stage" in r.content.decode()
    assert not Price.objects.exists()


def test_zero_goodput_gives_no_price(deployment, cost_version):
    make_run(deployment, total=0.0, output=0.0)
    d = price_derivation(public_model=MODEL)
    assert not d["derivable"] and "zero token goodput" in d["why"]


def test_without_a_cost_version_the_runs_frozen_figure_is_used_and_said(deployment):
    make_run(deployment)
    c = price_derivation(public_model=MODEL)["components"][0]
    assert c["gpu_cost_version_id"] is None and c["usd_per_gpu_hour"] == 2.49
    assert "no cost version" in c["gpu_cost_formula"]


def test_admin_publishes_the_reviewed_price_and_the_gateway_uses_it(deployment, cost_version, admin_client):
    run = make_run(deployment)
    d = price_derivation(public_model=MODEL)
    r = admin_client.post(
        reverse("cost:derived_price_publish"),
        {"public_model": MODEL, "fingerprint": d["fingerprint"], "note": "first goodput price"},
    )
    assert r.status_code == 302
    price = price_for(public_model=MODEL)
    assert price.source == "derived" and price.input_per_million == d["input_per_million"]
    assert price.provenance["run_id"] == run.pk and price.provenance["label"] == "measured"
    assert price.provenance["gpu_cost_version_id"] == cost_version.pk
    event = AuditEvent.objects.get(action="price.publish")
    assert event.evidence["run_id"] == run.pk and event.actor == "admin"


def test_a_stale_review_is_refused(deployment, cost_version, admin_client, admin_user):
    make_run(deployment, days_ago=3)
    stale = price_derivation(public_model=MODEL)["fingerprint"]
    make_run(deployment, days_ago=0, total=3000.0)  # a newer run changes the derivation
    r = admin_client.post(
        reverse("cost:derived_price_publish"), {"public_model": MODEL, "fingerprint": stale}
    )
    assert r.status_code == 400 and "review it again" in r.content.decode()
    assert not Price.objects.exists()


@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_derived_prices_page_by_role(role_clients, role, status, deployment, cost_version):
    make_run(deployment)
    r = role_clients[role].get(reverse("cost:derived_prices"))
    assert r.status_code == status
    if status == 200:
        html = r.content.decode()
        assert MODEL in html and "prefill share" in html.lower()
        assert ("Publish as new price version" in html) == (role == "admin")


@pytest.mark.parametrize("role,status", [("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)])
def test_only_admins_publish(role_clients, role, status, deployment, cost_version):
    make_run(deployment)
    fp = price_derivation(public_model=MODEL)["fingerprint"]
    r = role_clients[role].post(
        reverse("cost:derived_price_publish"), {"public_model": MODEL, "fingerprint": fp}
    )
    assert r.status_code == status and not Price.objects.exists()


def test_price_page_shows_provenance_to_tenants(deployment, cost_version, admin_user, member_client):
    run = make_run(deployment)
    d = price_derivation(public_model=MODEL)
    price_publish(public_model=MODEL, input_per_million=d["input_per_million"], output_per_million=d["output_per_million"],
                  provenance=d["provenance"], actor=admin_user)  # fmt: skip
    html = member_client.get(reverse("billing:price_list")).content.decode()
    assert f"benchmark #{run.pk}" in html and f"version #{cost_version.pk}" in html
    assert "capacity goodput tokens/s" in html
    assert (
        reverse("evaluations:run_detail", args=[run.pk]) not in html
    )  # tenants cannot open runs: no dead link


@pytest.mark.parametrize("i,o", [(Decimal("0"), Decimal("1")), (Decimal("1"), Decimal("-1"))])
def test_zero_or_negative_derived_prices_are_refused(i, o, admin_user):
    with pytest.raises(ValidationError):
        price_publish(
            public_model=MODEL,
            input_per_million=i,
            output_per_million=o,
            provenance={"formula": "x"},
            actor=admin_user,
        )
    assert not Price.objects.exists()


def _event(tenant, price, *, prompt, completion):
    now = timezone.now() - dt.timedelta(hours=1)
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, public_model=MODEL, price=price, prompt_tokens=prompt,
        completion_tokens=completion, cost_nanos=prompt * price.input_nanos + completion * price.output_nanos,
        status="ok", http_status=200, started_at=now, finished_at=now, received_at=now,
    )  # fmt: skip


def test_reprice_records_the_difference_and_leaves_events_as_billed(
    tenant, other_tenant, admin_user, admin_client
):
    # The old version is history (a new price cannot be backdated): seeded as a row.
    old = Price.objects.create(public_model=MODEL, input_per_million=Decimal("1"), output_per_million=Decimal("2"),
                               effective_from=timezone.now() - dt.timedelta(days=2))  # fmt: skip
    e1 = _event(tenant, old, prompt=1000, completion=500)
    _event(other_tenant, old, prompt=2000, completion=0)
    new = price_set(
        public_model=MODEL,
        input_per_million=Decimal("0.5"),
        output_per_million=Decimal("1.5"),
        actor=admin_user,
    )
    start, end = timezone.now() - dt.timedelta(days=1), timezone.now()
    rp = reprice_record(
        public_model=MODEL,
        period_start=start,
        period_end=end,
        price=new,
        reason="goodput price",
        actor=admin_user,
    )
    assert rp.billed_nanos == 1000 * 1000 + 500 * 2000 + 2000 * 1000
    assert rp.repriced_nanos == 1000 * 500 + 500 * 1500 + 2000 * 500
    assert {t["tenant_id"] for t in rp.by_tenant} == {tenant.pk, other_tenant.pk}
    e1.refresh_from_db()
    assert e1.cost_nanos == 2_000_000 and e1.price_id == old.pk  # never rewritten
    assert AuditEvent.objects.filter(action="price.reprice").count() == 1
    bad = admin_client.post(reverse("billing:reprice_create"), {"public_model": MODEL, "price_id": new.pk,
                             "period_start": "2026-11-10 00:00", "period_end": "2026-11-01 00:00", "reason": "x"})  # fmt: skip
    assert bad.status_code == 400 and "must end after it starts" in bad.content.decode()
    assert Reprice.objects.count() == 1
    ok = admin_client.post(reverse("billing:reprice_create"), {"public_model": MODEL, "price_id": new.pk,
                            "period_start": start.strftime("%Y-%m-%d %H:%M"), "period_end": end.strftime("%Y-%m-%d %H:%M"),
                            "reason": "again"})  # fmt: skip
    assert ok.status_code == 302 and Reprice.objects.count() == 2


@pytest.mark.parametrize("role", ["auditor", "member", "outsider"])
def test_only_admins_reprice(role_clients, role, admin_user):
    p = price_set(
        public_model=MODEL, input_per_million=Decimal("1"), output_per_million=Decimal("1"), actor=admin_user
    )
    r = role_clients[role].post(reverse("billing:reprice_create"), {"public_model": MODEL, "price_id": p.pk,
                                 "period_start": "2026-11-01 00:00", "period_end": "2026-11-02 00:00", "reason": "x"})  # fmt: skip
    assert r.status_code == 403 and not Reprice.objects.exists()
