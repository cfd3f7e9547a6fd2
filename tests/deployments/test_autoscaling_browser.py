"""In a real browser: an admin switches a deployment to autoscaling on its page, sees a minimum above
the maximum refused in place (htmx swaps the form with its error), then saves, sets the admission
limit, and reads the replica chart (drawn offline from the page's own data)."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from deployments.models import Deployment, DeploymentEvent
from tests.deployments.factories import DeploymentFactory
from tests.factories import UserFactory
from tests.support.browser import browser, login, page  # noqa: F401  (pytest fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_admin_sets_autoscaling_and_the_admission_limit_on_the_page(live_server, page):  # noqa: F811
    UserFactory(username="root", is_superuser=True, is_staff=True)
    d = DeploymentFactory(status="RUNNING", running_replicas=1)
    t0 = timezone.now() - dt.timedelta(hours=3)
    Deployment.objects.filter(pk=d.pk).update(created_at=t0)
    for hours, kind, running in ((0, "status", 1), (1, "replicas", 2), (2, "replicas", 1)):
        e = DeploymentEvent.objects.create(
            deployment=d, kind=kind, after={"status": "RUNNING", "running_replicas": running}
        )
        DeploymentEvent.objects.filter(pk=e.pk).update(created_at=t0 + dt.timedelta(hours=hours))
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}{d.get_absolute_url()}")

    page.select_option("#id_scaling_mode", "autoscaling")
    page.fill("#id_min_replicas", "4")
    page.fill("#id_max_replicas", "2")
    page.locator("#scale-form").get_by_role("button", name="Scale").click()
    expect(page.locator("#scale-form .field-error[data-field=min_replicas]")).to_contain_text(
        "The minimum (4 replicas) is above the maximum (2)"
    )
    d.refresh_from_db()
    assert d.scaling_mode == "fixed"

    page.fill("#id_min_replicas", "1")
    page.fill("#id_max_replicas", "3")
    page.fill("#id_upscale_delay_s", "5")
    page.fill("#id_downscale_delay_s", "90")
    page.locator("#scale-form").get_by_role("button", name="Scale").click()
    expect(page.locator("#autoscaling-explained")).to_contain_text("removes one after 90 s below")
    d.refresh_from_db()
    assert (d.scaling_mode, d.min_replicas, d.max_replicas, d.downscale_delay_s) == (
        "autoscaling",
        1,
        3,
        90.0,
    )
    # The suggestion loads into the page (nothing measured yet: it says so).
    expect(page.locator("#autoscaling-suggestion-card")).to_contain_text("no measured capacity benchmark yet")

    page.select_option("#id_source", "operator")
    page.fill("#id_max_inflight", "16")
    page.locator("#admission-form").get_by_role("button", name="Set limit").click()
    expect(page.locator("#admission-limit")).to_contain_text(
        "At most 16 requests in flight, set by an operator"
    )

    # The chart is drawn (Chart.js served by the project, no CDN): the canvas has a size and pixels.
    canvas = page.locator("#chart-replicas")
    expect(canvas).to_be_visible()
    assert page.evaluate("() => !!Chart.getChart(document.getElementById('chart-replicas'))")
    assert "peak 2" in page.locator("#replica-history-summary").inner_text()
    if os.environ.get("GOVERNOR_SCREENSHOTS"):
        page.screenshot(path=os.environ["GOVERNOR_SCREENSHOTS"], full_page=True)
