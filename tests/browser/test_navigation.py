"""The navigation at 1280 px, in a real browser: grouped in dropdowns so "Log out" stays in view,
no page wider than the window (wide tables scroll inside their card), dropdowns open and navigate."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.services.budgets import budget_set
from deployments.rollouts import services as rollout_services
from tests.deployments.rollout_fixtures import FAST_STEPS, TTFT_CHECK, route_with_canary, usage
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 1280


@pytest.fixture
def narrow_page(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": 800})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


@pytest.fixture
def rollout_with_analysis(db):
    """A rollout whose analysis ran (its table has every column filled), as in the rollout tests."""
    setup = route_with_canary()
    rollout = rollout_services.rollout_create(
        route=setup.route,
        stable=setup.stable,
        canary=setup.canary,
        steps=FAST_STEPS,
        checks=TTFT_CHECK,
        actor="t",
    )
    t0 = timezone.now() - dt.timedelta(seconds=60)
    rollout_services.rollout_advance(rollout_id=rollout.pk, now=t0)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=2), n=10, ttft_ms=100)
    usage(setup.canary, at=t0 + dt.timedelta(seconds=2), n=10, ttft_ms=640)
    rollout_services.analysis_run_execute(run_id=rollout.analysis_runs.get().pk)
    return rollout


def _overflow(page) -> tuple[int, int]:
    return page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")


def test_admin_navigation_fits_1280_px_with_log_out_in_view(
    narrow_page, live_server, admin_user, tenant, rollout_with_analysis, tmp_path
):
    page = narrow_page
    budget_set(tenant=tenant, amount_usd=Decimal("25"), actor=admin_user)
    login(page, live_server.url, "admin")
    pages = [
        "/",
        reverse("catalog:version_list"),
        reverse("catalog:gpu_list"),
        reverse("deployments:list"),
        reverse("deployments:rollout_list"),
        reverse("deployments:rollout_detail", args=[rollout_with_analysis.pk]),
        reverse("cost:gpu_costs"),
        reverse("evaluations:run_list"),
        reverse("gates:decision_list"),
        reverse("billing:usage"),
        reverse("billing:budget_list"),
        reverse("billing:price_list"),
        reverse("billing:key_list"),
        reverse("billing:tenant_list"),
        reverse("billing:tenant_cost", args=[tenant.slug]),
        reverse("audit:event_list"),
        reverse("notify:notification_list"),
        reverse("notify:oncall"),
        reverse("operations:slo_list"),
        reverse("operations:incident_list"),
    ]
    for path in pages:
        page.goto(live_server.url + path)
        scroll, inner = _overflow(page)
        assert scroll <= inner, f"{path} is {scroll} px wide in a {inner} px window"
        box = page.locator("#logout").bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= inner, (path, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= 800, (path, box)
    # The rollout's analysis table is all there: it scrolls inside its card rather than being cut off.
    page.goto(live_server.url + reverse("deployments:rollout_detail", args=[rollout_with_analysis.pk]))
    assert page.locator("#analysis-runs th", has_text="Result").count() == 1
    wrapper = page.locator("#analysis-runs").locator("xpath=..")
    assert "table-responsive" in (wrapper.get_attribute("class") or "")
    # At 1280 px it has the page's width: nothing to scroll, the last column in view.
    table_w, wrapper_w = page.evaluate(
        "() => [document.getElementById('analysis-runs').scrollWidth,"
        " document.getElementById('analysis-runs').parentElement.clientWidth]"
    )
    assert table_w <= wrapper_w
    last = page.locator("#analysis-runs th", has_text="Result").bounding_box()
    assert last["x"] + last["width"] <= WIDTH
    page.screenshot(path=str(tmp_path / "rollout-1280.png"), full_page=True)
    # "Log out" is clickable: it logs out.
    page.click("#logout")
    page.wait_for_url("**/accounts/login/**")


def test_dropdowns_open_and_navigate(narrow_page, live_server, admin_user, tmp_path):
    page = narrow_page
    login(page, live_server.url, "admin")
    for group, item, path in [
        ("Cost & budgets", "Prices", reverse("billing:price_list")),
        ("Serving & rollouts", "Rollouts", reverse("deployments:rollout_list")),
        ("Models & gates", "Gates", reverse("gates:decision_list")),
    ]:
        link = page.locator("#main-nav .dropdown-item", has_text=item).first
        assert not link.is_visible()  # closed until its group is opened
        page.click(f"#main-nav >> text={group}")
        assert link.is_visible()
        if group == "Cost & budgets":
            page.screenshot(path=str(tmp_path / "nav-open-1280.png"))
        link.click()
        page.wait_for_url(live_server.url + path)


def test_a_tenant_member_sees_the_groups_they_may_use(narrow_page, live_server, member_user):
    page = narrow_page
    login(page, live_server.url, "member")
    nav = page.locator("#main-nav").inner_text()
    assert "Cost & budgets" in nav and "Tenants" in nav
    assert "Serving & rollouts" not in nav and "Audit" not in nav
    assert page.locator("#logout").is_visible()
    scroll, inner = _overflow(page)
    assert scroll <= inner
