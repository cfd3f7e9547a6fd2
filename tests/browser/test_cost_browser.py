"""Cost as people use it, in a real browser: a tenant reads its spend over time and a price derived
from goodput (with its run and formula); an admin asks the planner how many H100s vs H200s a
traffic target needs at an SLA, and at what monthly cost."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest

from billing.services.prices import price_publish
from billing.services.rollups import usage_rollup_run
from catalog.services import gpu_cost_version_create
from evaluations.services.pricing import price_derivation
from tests.billing.test_rollups import make_event
from tests.deployments.factories import llama_8b_version
from tests.evaluations.test_planner import measured_run
from tests.evaluations.test_pricing import MODEL, make_run
from tests.factories import GpuTypeFactory
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_tenant_sees_spend_over_time_and_a_derived_price(page, live_server, member_user, tenant, admin_user):
    from tests.deployments.factories import ModelRouteFactory, RouteTargetFactory
    from tests.evaluations.factories import DeploymentFactory

    dep = DeploymentFactory(slug="llama-a")
    RouteTargetFactory(route=ModelRouteFactory(public_name=MODEL), deployment=dep, weight=100)
    version = gpu_cost_version_create(
        gpu_type=dep.gpu_type, basis="rent", rent_usd_per_hour=Decimal("3"), actor=admin_user
    )
    run = make_run(dep)
    d = price_derivation(public_model=MODEL)
    price_publish(public_model=MODEL, input_per_million=d["input_per_million"], output_per_million=d["output_per_million"],
                  provenance=d["provenance"], actor=admin_user)  # fmt: skip
    today = dt.datetime.now(dt.UTC).replace(hour=1, minute=0, second=0, microsecond=0)
    for days_ago, cost in [(3, 1_000_000_000), (2, 2_000_000_000), (1, 3_000_000_000)]:
        make_event(tenant, at=today - dt.timedelta(days=days_ago), cost=cost, model=MODEL)
    usage_rollup_run(lag_seconds=0)

    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, "member")
    page.goto(f"{live_server.url}/billing/tenants/{tenant.slug}/cost/")
    assert page.locator("#total-cost").inner_text() == "$6.0000"
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-spend'))")
    bars = page.evaluate("() => Chart.getChart(document.getElementById('chart-spend')).data.datasets[0].data")
    assert bars == [1.0, 2.0, 3.0]  # spend per day, oldest first
    page.select_option("select[name=bucket]", "month")
    page.click("text=Show")
    page.wait_for_url(re.compile(r"bucket=month"))
    assert page.locator("#total-cost").inner_text() == "$6.0000"
    assert MODEL in page.locator("#by-model").inner_text()

    page.click("nav >> text=Cost & budgets")
    page.click("nav >> text=Prices")
    cell = page.locator(".provenance").first
    text = cell.inner_text()
    assert f"benchmark #{run.pk}" in text and f"version #{version.pk}" in text and "measured" in text
    assert "capacity goodput tokens/s × 3600" in text
    assert str(d["input_per_million"]) in page.locator("tbody").first.inner_text()
    assert not errors, errors


def test_planner_answers_h100_vs_h200(page, live_server, admin_user, celery_worker_process):
    v = llama_8b_version()
    h100 = GpuTypeFactory()
    h200 = GpuTypeFactory(name="H200 SXM", memory_gib=Decimal("141"), hbm_bandwidth_gbps=Decimal("4800"),
                          rental_usd_per_hour=Decimal("3.50"))  # fmt: skip
    measured_run(v, h100)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, "admin")
    page.click("nav >> text=Serving & rollouts")
    page.click("nav >> text=Planner")
    page.fill("#id_name", "chat launch")
    page.fill("#id_peak_qps", "20")
    page.select_option("#id_model_versions", [str(v.pk)])
    page.select_option("#id_gpu_types", [str(h100.pk), str(h200.pk)])
    page.select_option("#id_tensor_parallel", ["1"])
    page.click("#plan-form button")
    page.wait_for_url(re.compile(r"/cost/plans/[0-9a-f-]{36}/$"))
    # A worker computes the plan; the page shows progress and reloads itself when it is done.
    page.wait_for_selector("tr.plan-row", timeout=180_000)
    rows = {r.get_attribute("data-gpu"): r for r in page.locator("tr.plan-row").all()}
    assert set(rows) == {"H100 SXM", "H200 SXM"}
    assert "measured" in rows["H100 SXM"].inner_text() and "predicted" in rows["H200 SXM"].inner_text()
    assert rows["H100 SXM"].locator(".gpus").inner_text() == "2"  # ⌈20 × 640 ÷ 10,000 × 1.3⌉
    for r in rows.values():
        assert re.fullmatch(r"\$[0-9,]+", r.locator(".monthly").inner_text())
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-plan'))")
    shared = page.url
    page.goto(shared)  # the saved plan's URL is stable
    assert page.locator("h1").inner_text() == "chat launch"
    assert not errors, errors
