"""An admin starts a benchmark in the browser, watches the progress bar, and reads the report."""

from __future__ import annotations

import pytest

from tests.support.browser import browser, login, page  # noqa: F401 (fixtures)
from tests.support.servers import paced_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_admin_starts_a_run_watches_it_finish_and_reads_the_report(
    page,  # noqa: F811
    live_server,
    celery_worker_process,
    admin_user,
):
    base = live_server.url
    login(page, base, admin_user.username)
    with paced_server("--ttft-ms", "40", "--tpot-ms", "10") as url:
        page.goto(f"{base}/benchmarks/new/")
        page.select_option("#id_mode", "ladder")
        page.select_option("#id_target_kind", "url")
        page.fill("#id_base_url", url)
        page.fill("#id_model_name", "paced")
        page.select_option("#id_arrival", "constant")
        page.fill("#id_ladder", "3, 6")
        page.fill("#id_input_a", "16")
        page.fill("#id_output_a", "24")
        page.fill("#id_duration_s", "3")
        page.fill("#id_warmup_requests", "0")
        page.fill("#id_name", "browser ladder")
        page.click("#run-form button[type=submit]")
        page.wait_for_url(f"{base}/benchmarks/*/")
        # While it runs the progress partial polls; when it ends the page reloads with the report.
        page.wait_for_selector("#run-progress[data-status=running], #run-progress[data-status=succeeded]")
        page.wait_for_selector("#headline", timeout=90_000)
    assert page.locator("#run-progress").get_attribute("data-status") == "succeeded"
    assert "browser ladder" in page.inner_text("h1")
    assert page.locator(".badge-measured").first.is_visible()
    assert page.locator("#stages-table tbody tr").count() == 2
    page.wait_for_selector("body[data-charts-ready='1']", state="attached")
    for chart in ("chart-latency", "chart-goodput", "chart-dist", "chart-kv"):
        assert page.locator(f"#{chart}").bounding_box()["height"] > 50
    csv_resp = page.request.get(page.url + "export.csv")
    assert csv_resp.ok and csv_resp.text().count("\n") == 3
    # What each stage sent against what it names: one row per stage, rates and lengths measured.
    assert page.locator("#workload-check tbody tr").count() == 2
    assert "req/s" in page.inner_text("#workload-check tbody tr >> nth=0")
    # The cross-check button says why it cannot run here (no local tokenizer files for this URL).
    report_url = page.url
    page.click("#cross-check-button")
    alert = page.wait_for_selector(".alert-danger[role=alert]")
    assert "cross-check" in alert.inner_text().lower() or "tokenizer" in alert.inner_text()
    page.goto(report_url)
    # Compare with itself from the report page.
    page.click("text=Compare…")
    page.click("form[action$='/compare/'] button[type=submit]")
    page.wait_for_selector("#compare-table")


@pytest.mark.django_db(transaction=True)
def test_admin_sweeps_a_deployment_and_compares_with_an_earlier_run(
    page,  # noqa: F811
    live_server,
    celery_worker_process,
    admin_user,
):
    from .factories import BenchmarkRunFactory, DeploymentFactory

    earlier = BenchmarkRunFactory(name="earlier measured run")
    dep = DeploymentFactory(name="llama-8b-h100", tensor_parallel_size=1)
    base = live_server.url
    login(page, base, admin_user.username)
    page.goto(f"{base}/benchmarks/new/?deployment={dep.pk}")
    page.select_option("#id_kind", "predicted")
    page.select_option("#id_mode", "sweep")
    page.fill("#id_rate", "4")
    page.fill("#id_duration_s", "20")
    page.fill("#id_name", "predicted sweep")
    page.click("#run-form button[type=submit]")
    page.wait_for_url(f"{base}/benchmarks/*/")
    page.wait_for_selector("#headline", timeout=90_000)
    assert page.locator(".badge-predicted").first.is_visible()
    assert "req/s" in page.inner_text("#capacity-rate") and "$" in page.inner_text("#usd-per-mtok")
    run_url = page.url
    json_resp = page.request.get(run_url + "export.json")
    assert json_resp.ok and json_resp.json()["results"]["sweep"]["converged"]
    page.goto(f"{base}/benchmarks/compare/?a={earlier.pk}&b={run_url.rstrip('/').split('/')[-1]}")
    page.wait_for_selector("#compare-table")
    text = page.inner_text("#compare-table")
    assert "earlier measured run" in text and "predicted sweep" in text and "$ / M output tokens" in text
