"""In a real browser, against a real gateway and engines: an admin starts a canary, watches it step
forward and promotes it; a canary with latency injected from its page aborts by itself and the page
shows the failing values."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from deployments.models import Rollout
from tests.factories import UserFactory
from tests.gateway.rollout_stack import Load, Ticker, analysis_worker, engines, make_pair, serve_route
from tests.support.browser import browser, login, page  # noqa: F401  (pytest fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _start_rollout(pg, base: str, route, pair, steps: list[dict], checks: list[dict]) -> Rollout:
    pg.goto(f"{base}/deployments/routes/{route.pk}/")
    pg.get_by_role("link", name="Start a rollout").click()
    pg.select_option("#id_canary", str(pair.canary.pk))
    expect(pg.locator("#id_stable")).to_have_value(str(pair.stable.pk))  # prefilled from the route
    pg.fill("#id_steps", json.dumps(steps))
    pg.fill("#id_checks", json.dumps(checks))
    pg.get_by_role("button", name="Start").click()
    pg.wait_for_url(re.compile(r"/deployments/rollouts/\d+/$"))
    return Rollout.objects.get(route=route)


def test_admin_starts_a_canary_watches_it_step_forward_and_promotes_it(
    live_server,
    gateway,
    gw_tmp,
    settings,
    tenant,
    page,  # noqa: F811
):
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    pair = make_pair("browser-good")
    with (
        engines(gw_tmp, [pair.stable, pair.canary], "browser-good") as serve_url,
        analysis_worker(gw_tmp, serve_url),
    ):
        settings.RAY_SERVE_URL = serve_url
        route, secret = serve_route(gateway, pair, model_name="browser-good", tenant=tenant, actor=admin)
        with Load(gateway, secret, "browser-good"), Ticker():
            login(page, live_server.url, "root")
            rollout = _start_rollout(
                page,
                live_server.url,
                route,
                pair,
                steps=[
                    {"kind": "set_weight", "weight": 20},
                    {"kind": "analysis", "window_s": 6},
                    {"kind": "set_weight", "weight": 50},
                    {"kind": "pause"},
                    {"kind": "set_weight", "weight": 100},
                ],
                checks=[{"metric": "error_rate", "limit": 0.05, "relative": False, "min_samples": 3}],
            )
            # No reload: the live block polls itself while the controller steps through the plan.
            expect(page.locator("#canary-weight")).to_have_text("20", timeout=20_000)
            expect(page.locator("#analysis-runs .verdict-passed").first).to_be_visible(timeout=60_000)
            expect(page.locator("#canary-weight")).to_have_text("50", timeout=20_000)
            expect(page.locator("#rollout-live [data-phase]")).to_have_attribute("data-phase", "paused")
            expect(page.locator("#rollout-message")).to_contain_text("waiting for an admin")
            expect(page.locator("canvas[data-metric=error_rate]")).to_be_visible()

            page.locator('.rollout-action[data-action="promote"] input[name=reason]').fill(
                "canary looks good"
            )
            page.locator('.rollout-action[data-action="promote"] button').click()
            expect(page.locator("#rollout-live [data-phase]")).to_have_attribute("data-phase", "healthy")
            expect(page.locator("#canary-weight")).to_have_text("100")
            expect(page.locator(".rollout-outcome")).to_have_text("Promoted")
            rollout.refresh_from_db()
            assert rollout.outcome == "promoted" and rollout.canary_weight == 100


def test_canary_with_injected_latency_aborts_by_itself_and_shows_why(
    live_server,
    gateway,
    gw_tmp,
    settings,
    tenant,
    page,  # noqa: F811
):
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    pair = make_pair("browser-slow")
    login(page, live_server.url, "root")
    # The admin injects +600 ms TTFT into the canary from its page (Ray would redeploy it; here the
    # engines are started from the compiled arguments right after).
    page.goto(f"{live_server.url}/deployments/{pair.canary.pk}/")
    page.fill("#f-ttft", "600")
    page.locator("#faults-form input[name=reason]").fill("rehearse a slow canary")
    page.get_by_role("button", name="Inject").click()
    expect(page.locator(".faults-badge").first).to_have_text("faults injected")

    with (
        engines(gw_tmp, [pair.stable, pair.canary], "browser-slow") as serve_url,
        analysis_worker(gw_tmp, serve_url),
    ):
        settings.RAY_SERVE_URL = serve_url
        route, secret = serve_route(gateway, pair, model_name="browser-slow", tenant=tenant, actor=admin)
        with Load(gateway, secret, "browser-slow"), Ticker():
            _start_rollout(
                page,
                live_server.url,
                route,
                pair,
                steps=[
                    {"kind": "set_weight", "weight": 50},
                    # Long enough for a slowed canary to answer a few requests on a busy machine;
                    # with too few samples the analysis measures again over a longer window.
                    {"kind": "analysis", "window_s": 20},
                    {"kind": "set_weight", "weight": 100},
                ],
                checks=[{"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 3}],
            )
            expect(page.locator(".faults-badge")).to_be_visible()
            expect(page.locator("#rollout-live [data-phase]")).to_have_attribute(
                "data-phase", "degraded", timeout=120_000
            )
            expect(page.locator(".rollout-outcome")).to_have_text("Aborted")
            expect(page.locator("#canary-weight")).to_have_text("0")
            expect(page.locator("#rollout-message")).to_contain_text("ttft_p95_ms (p95 TTFT): canary")
            row = page.locator("#analysis-runs tr.result-failed[data-metric=ttft_p95_ms]")
            expect(row).to_be_visible()
            expect(row.locator(".canary-value")).to_contain_text(" ms")
            canary_ms = float(row.locator(".canary-value").get_attribute("data-value"))
            assert canary_ms >= 600
