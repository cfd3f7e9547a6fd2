"""In a real browser: an admin creates a deployment, watches it go RUNNING, scales it, sees Ray's error."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from catalog.models import GpuType
from deployments.models import Deployment
from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory, UserFactory
from tests.support.browser import browser, login, page  # noqa: F401  (pytest fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.ray, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_admin_creates_a_deployment_and_watches_it_run(live_server, ray_env, deployments_worker, page):  # noqa: F811
    UserFactory(username="root", is_superuser=True, is_staff=True)
    version = llama_8b_version()
    gpu = GpuType.objects.filter(name="H100 SXM").first() or GpuTypeFactory()
    login(page, live_server.url, "root")

    page.goto(f"{live_server.url}/deployments/")
    page.get_by_role("link", name="New deployment").click()
    page.fill("#id_name", "Browser Llama")
    page.fill("#id_slug", "browser-llama")
    page.select_option("#id_model_version", str(version.pk))
    page.select_option("#id_engine_kind", "simulated")
    page.select_option("#id_gpu_type", str(gpu.pk))
    page.fill("#id_max_model_len", "8192")
    page.fill("#id_max_num_seqs", "32")
    page.fill("#id_time_scale", "0.05")
    page.get_by_role("button", name="Create deployment").click()

    deployment = Deployment.objects.get(slug="browser-llama")
    page.wait_for_url(re.compile(rf"/deployments/{deployment.pk}/$"))
    expect(page.locator("#openai-base-url")).to_have_text(f"{ray_env.serve_url}/d/browser-llama/v1")
    # No reload: the status block polls itself with htmx until Ray reports RUNNING.
    expect(page.locator("#deployment-status [data-status]").first).to_have_attribute(
        "data-status", "RUNNING", timeout=180_000
    )
    expect(page.locator("#replica-table .replica-row[data-state=RUNNING]")).to_have_count(1)
    expect(page.locator("#event-timeline")).to_contain_text("RUNNING")

    # Scale to two replicas from the page and watch the replica table follow.
    page.fill("#id_num_replicas", "2")
    page.locator("#scale-form").get_by_role("button", name="Scale").click()
    expect(page.locator("#replica-table .replica-row[data-state=RUNNING]")).to_have_count(2, timeout=120_000)

    # A broken engine argument: Ray's own message shows on the page.
    page.goto(f"{live_server.url}/deployments/new/")
    page.fill("#id_name", "Broken")
    page.fill("#id_slug", "broken")
    page.select_option("#id_model_version", str(version.pk))
    page.select_option("#id_gpu_type", str(gpu.pk))
    page.fill("#id_max_model_len", "8192")
    page.fill("#id_max_num_seqs", "32")
    page.fill("#id_extra_engine_args", '{"no_such_engine_arg": 1}')
    page.get_by_role("button", name="Create deployment").click()
    expect(page.locator("#deployment-status [data-status]").first).to_have_attribute(
        "data-status", "DEPLOY_FAILED", timeout=180_000
    )
    expect(page.locator("#last-error")).to_contain_text("no_such_engine_arg")

    # The list shows both, live.
    page.goto(f"{live_server.url}/deployments/")
    expect(page.locator("tr[data-slug=browser-llama] [data-status]")).to_have_attribute(
        "data-status", "RUNNING"
    )
    expect(page.locator("tr[data-slug=broken] [data-status]")).to_have_attribute(
        "data-status", "DEPLOY_FAILED"
    )
