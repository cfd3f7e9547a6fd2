"""The catalog as people use it, in a real browser: sign in, filter, read estimates, create a version."""

import os
import re
from pathlib import Path

import pytest

from catalog.models import ModelVersion
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def catalog_data(db):
    GpuTypeFactory()
    GpuTypeFactory(
        name="L40S",
        memory_gib=48,
        hbm_bandwidth_gbps=864,
        bf16_tflops=362,
        fp8_tflops=733,
        rental_usd_per_hour=0.99,
    )
    llama = ModelFactory()
    ModelVersionFactory(model=llama, label="bf16", lifecycle="serving")
    ModelVersionFactory(model=llama, label="fp8", precision="fp8", kv_cache_dtype="fp8")
    big = ModelFactory(
        name="Llama-3.1-405B",
        parameter_count=405_000_000_000,
        layers=126,
        hidden_size=16384,
        attention_heads=128,
        kv_heads=8,
    )
    ModelVersionFactory(model=big, label="bf16")


def test_admin_filters_versions_and_reads_memory_estimates(page, live_server, admin_user, catalog_data):
    login(page, live_server.url, "admin")
    page.click("nav >> text=Models & gates")
    page.click("nav >> text=Catalog")
    page.select_option("select[name=precision]", "fp8")
    page.wait_for_function("() => !document.querySelector('#version-table').innerText.includes('405B')")
    rows = page.locator("#version-table tbody tr")
    assert rows.count() == 1 and "fp8" in rows.first.inner_text()
    assert "precision=fp8" in page.url  # filters are in the URL, so the view can be shared
    rows.first.locator("a", has_text="fp8").click()
    table = page.locator("#memory-estimates")
    assert "H100 SXM" in table.inner_text() and "fits on 1 × H100 SXM" in table.inner_text()
    page.fill("input[name=context_len]", "32768")
    page.click("text=Recompute")
    page.wait_for_function("() => document.querySelector('#memory-estimates').innerText.includes('32,768')")
    shots = os.environ.get("GOVERNOR_SCREENSHOT_DIR")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "catalog-version.png"), full_page=True)


def test_big_model_says_does_not_fit(page, live_server, member_user, catalog_data):
    login(page, live_server.url, "member")
    version = ModelVersion.objects.get(model__name="Llama-3.1-405B")
    page.goto(f"{live_server.url}/catalog/versions/{version.pk}/")
    assert page.locator(".does-not-fit").count() == 2
    assert page.locator("text=Edit").count() == 0  # members read, never edit


def test_admin_creates_version_and_sees_field_errors_first(page, live_server, admin_user, catalog_data):
    login(page, live_server.url, "admin")
    page.goto(f"{live_server.url}/catalog/versions/new/")
    page.select_option("select[name=model]", label="Llama-3.1-8B-Instruct")
    page.fill("input[name=label]", "bf16")  # already exists for this model
    page.fill("input[name=weights_uri]", "s3://weights/llama")
    page.click("button:has-text('Save')")
    error = page.locator(".invalid-feedback, .alert-danger").first
    error.wait_for()
    assert "already exists" in page.locator("#form-container").inner_text()
    assert ModelVersion.objects.filter(label="bf16").count() == 2
    page.fill("input[name=label]", "w4a16-awq")
    page.select_option("select[name=precision]", "w4a16")
    page.click("button:has-text('Save')")
    page.wait_for_url(re.compile(r".*/catalog/versions/\d+/$"))
    assert "w4a16-awq" in page.content()
    assert ModelVersion.objects.get(label="w4a16-awq").created_by == admin_user


def test_member_reads_where_memory_goes_in_the_kv_calculator(page, live_server, member_user, catalog_data):
    login(page, live_server.url, "member")
    page.goto(f"{live_server.url}/catalog/kv/")
    version = ModelVersion.objects.get(label="fp8")
    page.select_option("select[name=version]", str(version.pk))
    page.select_option("select[name=gpu_type]", label="H100 SXM")
    page.fill("input[name=context_len]", "8192")
    page.fill("input[name=concurrency]", "16")
    page.click("#kv-form button")
    figures = page.locator("#kv-figures")
    figures.wait_for()
    text = figures.inner_text()
    for part in (
        "Weights: embeddings",
        "Weights: decoder layers",
        "Weights: lm_head",
        "Activation peak",
        "KV pool",
    ):
        assert part in text
    # fp8 quantizes the decoder's linear layers only: embeddings and lm_head stay 16-bit (1002.0 MB each).
    assert figures.locator("[data-part=embeddings]").inner_text() == "1002.0\xa0MB"
    assert figures.locator("[data-part=lm_head]").inner_text() == "1002.0\xa0MB"
    assert "vLLM V1" in text
