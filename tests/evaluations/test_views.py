"""Benchmark pages and API for every role: admins do everything, auditors read and export, others get 403."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from evaluations.models import BenchmarkRun

from .factories import BenchmarkRunFactory, DeploymentFactory

pytestmark = pytest.mark.django_db

READERS = {"admin": 200, "auditor": 200, "member": 403, "outsider": 403}


@pytest.fixture
def run(db):
    return BenchmarkRunFactory()


def _read_urls(run):
    return [
        reverse("evaluations:run_list"),
        reverse("evaluations:run_detail", args=[run.pk]),
        reverse("evaluations:run_progress", args=[run.pk]),
        reverse("evaluations:run_export_json", args=[run.pk]),
        reverse("evaluations:run_export_csv", args=[run.pk]),
        reverse("evaluations:run_compare") + f"?a={run.pk}&b={run.pk}",
        reverse("evaluations-api:run_list"),
        reverse("evaluations-api:run_detail", args=[run.pk]),
        reverse("evaluations-api:run_status", args=[run.pk]),
    ]


@pytest.mark.parametrize("role", list(READERS))
def test_read_views_by_role(role_clients, role, run):
    client = role_clients[role]
    for url in _read_urls(run):
        assert client.get(url).status_code == READERS[role], url


def test_anonymous_is_sent_to_login_or_refused(anon_client, run):
    for url in _read_urls(run):
        resp = anon_client.get(url)
        if "/api/" in url:
            assert resp.status_code in (401, 403), url
        else:
            assert resp.status_code == 302 and "login" in resp["Location"], url


@pytest.mark.parametrize(
    ("role", "expected"), [("admin", 200), ("auditor", 403), ("member", 403), ("outsider", 403)]
)
def test_start_form_is_for_admins_only(role_clients, role, expected):
    assert role_clients[role].get(reverse("evaluations:run_create")).status_code == expected


@pytest.mark.parametrize("role", ["auditor", "member", "outsider"])
def test_non_admins_cannot_start_or_cancel(role_clients, role, run):
    c = role_clients[role]
    run.status = "running"
    run.save()
    assert c.post(reverse("evaluations:run_create"), {}).status_code == 403
    assert c.post(reverse("evaluations:run_cancel", args=[run.pk])).status_code == 403
    assert c.post(reverse("evaluations-api:run_list"), {}, content_type="application/json").status_code == 403
    assert c.post(reverse("evaluations-api:run_cancel", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == "running" and BenchmarkRun.objects.count() == 1


def _form(**over):
    data = {
        "kind": "measured",
        "mode": "single",
        "target_kind": "url",
        "base_url": "http://127.0.0.1:9/v1",
        "model_name": "paced",
        "api": "completions",
        "tensor_parallel": 1,
        "replicas": 1,
        "arrival": "poisson",
        "rate": 2,
        "burstiness": 1,
        "concurrency": 4,
        "input_kind": "fixed",
        "input_a": 32,
        "output_kind": "fixed",
        "output_a": 16,
        "shared_prefix_ratio": 0,
        "prefix_groups": 1,
        "temperature": 0,
        "ignore_eos": "on",
        "duration_s": 5,
        "warmup_requests": 0,
        "processes": 0,
        "ttft_ms": 1000,
        "tpot_ms": 50,
        "target_attainment": 0.9,
        "max_rate": 100,
        "rel_tol": 0.05,
        "max_stages": 8,
    }
    data.update(over)
    return data


def test_admin_starts_a_run_from_the_form(admin_client, django_capture_on_commit_callbacks, monkeypatch):
    enqueued = []
    monkeypatch.setattr(
        "evaluations.services.benchmarks._enqueue", enqueued.append
    )  # the Celery path has its own test
    with django_capture_on_commit_callbacks(execute=True):
        resp = admin_client.post(reverse("evaluations:run_create"), _form(name="form run"))
    run = BenchmarkRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == run.get_absolute_url()
    assert enqueued == [run.pk]
    assert run.status == "queued" and run.name == "form run" and run.created_by.username == "admin"
    assert run.workload["arrival"] == {"kind": "poisson", "rate": 2.0}
    assert run.sampling == {"temperature": 0.0, "ignore_eos": True}


def test_form_errors_are_shown_on_their_fields(admin_client):
    resp = admin_client.post(
        reverse("evaluations:run_create"), _form(base_url="not-a-url", input_kind="uniform")
    )
    assert resp.status_code == 400
    body = resp.content.decode()
    assert 'data-field="input_b"' in body  # uniform lengths need b (form-level)
    resp = admin_client.post(reverse("evaluations:run_create"), _form(base_url="not-a-url"))
    assert 'data-field="base_url"' in resp.content.decode()  # service-level validation, on its field
    resp = admin_client.post(
        reverse("evaluations:run_create"), _form(mode="ladder", ladder="1, x"), HTTP_HX_REQUEST="true"
    )
    assert resp.status_code == 200 and 'data-field="ladder"' in resp.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_predicted_run_from_the_form_on_a_deployment(admin_client, monkeypatch):
    monkeypatch.setattr("evaluations.services.benchmarks._enqueue", lambda pk: None)
    dep = DeploymentFactory()
    resp = admin_client.post(
        reverse("evaluations:run_create"),
        _form(kind="predicted", mode="sweep", target_kind="deployment", deployment=dep.pk),
    )
    assert resp.status_code == 302
    run = BenchmarkRun.objects.get()
    assert run.kind == "predicted" and run.deployment == dep and run.snapshot["gpus"] == 2


def test_detail_page_shows_report_badges_and_chart_data(auditor_client, run):
    resp = auditor_client.get(run.get_absolute_url())
    body = resp.content.decode()
    assert "badge-measured" in body and "Capacity goodput" in body
    assert 'id="chart-data"' in body and "chart-latency" in body and "chart-kv" in body
    assert "GPU $/hour × GPUs" in body  # the cost formula is shown next to the figure
    predicted = BenchmarkRunFactory(kind="predicted")
    body = auditor_client.get(predicted.get_absolute_url()).content.decode()
    assert "badge-predicted" in body and "virtual-time simulator" in body


def test_progress_partial_polls_while_active_and_refreshes_when_done(admin_client, run):
    run.status, run.progress, run.progress_message = "running", 42, "stage 2: 4 req/s"
    run.save()
    url = reverse("evaluations:run_progress", args=[run.pk])
    body = admin_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 1s"' in body and "42%" in body and "stage 2: 4 req/s" in body
    run.status = "succeeded"
    run.save()
    resp = admin_client.get(url + "?was_active=1", HTTP_HX_REQUEST="true")
    assert resp.headers.get("HX-Refresh") == "true"


def test_exports(auditor_client, run):
    resp = auditor_client.get(reverse("evaluations:run_export_json", args=[run.pk]))
    data = json.loads(resp.content)
    assert data["id"] == run.pk and data["results"]["stages"][0]["requests"] == 4
    assert "attachment" in resp["Content-Disposition"]
    resp = auditor_client.get(reverse("evaluations:run_export_csv", args=[run.pk]))
    rows = list(csv.reader(io.StringIO(resp.content.decode())))
    assert rows[0][:3] == ["stage", "offered level", "unit"] and "TTFT p99 (ms)" in rows[0]
    assert rows[1][0] == "1" and rows[1][3] == "4"


def test_compare_page_puts_two_runs_side_by_side(auditor_client, run):
    other = BenchmarkRunFactory(kind="predicted", name="other")
    resp = auditor_client.get(reverse("evaluations:run_compare") + f"?a={run.pk}&b={other.pk}")
    body = resp.content.decode()
    assert resp.status_code == 200 and 'id="compare-table"' in body and "compare-data" in body
    assert "Capacity goodput" in body and "$ / M output tokens" in body
    assert "predicted</b> and the other <b>measured" in body


def test_list_filters_and_query_count(admin_client, django_assert_max_num_queries):
    for _ in range(5):
        BenchmarkRunFactory(deployment=DeploymentFactory())
    BenchmarkRunFactory(kind="predicted", name="pred")
    with django_assert_max_num_queries(8):
        resp = admin_client.get(reverse("evaluations:run_list"))
    measured_row = 'title="Measured with real requests'
    assert resp.status_code == 200 and resp.content.decode().count(measured_row) == 5
    body = admin_client.get(reverse("evaluations:run_list") + "?kind=predicted").content.decode()
    assert "pred" in body and body.count(measured_row) == 0 and "Predicted by the virtual-time" in body


def test_api_start_follow_fetch_and_cancel(admin_client, monkeypatch):
    monkeypatch.setattr("evaluations.services.benchmarks._enqueue", lambda pk: None)
    body = {
        "target_kind": "url",
        "base_url": "http://127.0.0.1:9/v1",
        "model_name": "paced",
        "mode": "ladder",
        "ladder": [1, 2],
        "workload": {
            "arrival": {"kind": "constant", "rate": 1},
            "input": {"kind": "fixed", "value": 8},
            "output": {"kind": "fixed", "value": 8},
        },
        "sla": {"ttft_ms": 500},
        "stage": {"num_requests": 4},
    }
    resp = admin_client.post(reverse("evaluations-api:run_list"), body, content_type="application/json")
    assert resp.status_code == 201, resp.content
    rid = resp.json()["id"]
    assert resp.json()["status"] == "queued" and resp["Location"].endswith(f"/{rid}/")
    st = admin_client.get(reverse("evaluations-api:run_status", args=[rid])).json()
    assert st["progress"] == 0 and st["status"] == "queued"
    full = admin_client.get(reverse("evaluations-api:run_detail", args=[rid])).json()
    assert full["ladder"] == [1.0, 2.0] and full["sla"]["ttft_ms"] == 500
    assert admin_client.post(reverse("evaluations-api:run_cancel", args=[rid])).status_code == 200
    assert admin_client.post(reverse("evaluations-api:run_cancel", args=[rid])).status_code == 409
    bad = dict(body, mode="ladder", ladder=[])
    resp = admin_client.post(reverse("evaluations-api:run_list"), bad, content_type="application/json")
    assert resp.status_code == 400 and "ladder" in resp.json()
    listing = admin_client.get(reverse("evaluations-api:run_list") + "?status=cancelled").json()
    assert [r["id"] for r in listing["results"]] == [rid]


def test_api_schema_documents_the_endpoints(admin_client):
    resp = admin_client.get(reverse("api-schema"))
    text = resp.content.decode()
    assert "/api/evaluations/runs/" in text and "/api/evaluations/runs/{id}/status/" in text
