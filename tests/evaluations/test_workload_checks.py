"""What a run sent versus what it names, on the run page; the vLLM cross-check button; bad workloads refused."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from audit.models import AuditEvent
from evaluations.models import BenchmarkRun
from evaluations.reports import build_results
from loadtest import Sla
from loadtest.loadgen import PlannedRequest
from loadtest.metrics import length_report, offered_rate_report, summarize
from loadtest.records import RequestRecord
from loadtest.runner import StageResult
from tests.support.ci import skip_unless_ci
from tests.support.servers import ROOT, paced_server

from .factories import BenchmarkRunFactory, DeploymentFactory

pytestmark = pytest.mark.django_db


def _results_with_checks() -> dict:
    """A stage whose client fell behind (rate) and whose server counted more input than asked."""
    planned = [
        PlannedRequest(index=i, offset_s=i * 0.1, prompt="x", max_tokens=8, prompt_tokens=100)
        for i in range(40)
    ]
    recs = [
        RequestRecord(
            index=i,
            planned_s=1 + i * 0.1,
            sent_s=1 + i * 0.11,
            chunk_s=[1 + i * 0.11 + 0.05 + 0.01 * k for k in range(8)],
            prompt_tokens=110,
            output_tokens=8,
        )
        for i in range(40)
    ]
    summary = summarize(recs, sla=Sla(), offered={"kind": "poisson", "rate": 10.0})
    summary["lengths"] = length_report(recs, planned, source="usage_calibration")
    rate = offered_rate_report(recs, planned, named_rate=10.0, window_s=4.0)
    summary["offered"].update(rate["figures"])
    summary["warnings"] += summary["lengths"]["warnings"] + rate["warnings"]
    summary["warmup"] = {"requests": 3, "failed": 0}
    results, _ = build_results(
        stages=[StageResult(summary=summary, series=[])],
        sla=Sla().to_dict(),
        snapshot={},
        target_attainment=0.9,
    )
    return results


def test_run_page_shows_requested_and_actual_lengths_and_rates_with_warnings(auditor_client):
    run = BenchmarkRunFactory(results=_results_with_checks())
    html = auditor_client.get(reverse("evaluations:run_detail", args=[run.pk])).content.decode()
    assert 'id="workload-check"' in html
    assert "100.0 / 100 / 100" in html and "110.0 / 110 / 110" in html  # requested vs actual input
    assert "10.00 %" in html  # input error
    assert "9.091 req/s" in html  # achieved offered rate of a client 10 % behind
    assert "LENGTH MISMATCH" in html and "RATE MISMATCH" in html
    csv_text = auditor_client.get(reverse("evaluations:run_export_csv", args=[run.pk])).content.decode()
    assert "achieved offered rate (req/s)" in csv_text and "input length error (%)" in csv_text


@pytest.mark.parametrize(("role", "expected"), [("auditor", 403), ("member", 403), ("outsider", 403)])
def test_only_admins_may_ask_for_a_cross_check(role_clients, role, expected):
    run = BenchmarkRunFactory()
    resp = role_clients[role].post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == expected
    run.refresh_from_db()
    assert "cross_check" not in run.results


def test_anonymous_cross_check_goes_to_login(anon_client):
    run = BenchmarkRunFactory()
    resp = anon_client.post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == 302 and "login" in resp["Location"]


def test_cross_check_without_vllm_says_so_and_changes_nothing(admin_client, monkeypatch):
    run = BenchmarkRunFactory(snapshot={"tokenizer_dir": str(ROOT / "var/models/tiny-llama")})
    monkeypatch.setattr("loadtest.crosscheck.vllm_cli", lambda: None)  # a host without vLLM
    resp = admin_client.post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == 409
    assert "vLLM is not installed" in resp.content.decode()
    run.refresh_from_db()
    assert (
        "cross_check" not in run.results
        and not AuditEvent.objects.filter(action="benchmark_run.cross_check").exists()
    )


def test_cross_check_without_the_model_tokenizer_says_so(admin_client):
    run = BenchmarkRunFactory()
    resp = admin_client.post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == 409
    assert (
        "tokenizer files are not available" in resp.content.decode()
        or "vLLM is not installed" in resp.content.decode()
    )


def test_admin_queues_a_cross_check_and_it_is_audited(
    admin_client, monkeypatch, django_capture_on_commit_callbacks
):
    from engines.tiny_model import ensure_tiny_model
    from loadtest.crosscheck import vllm_cli

    if vllm_cli() is None:
        skip_unless_ci("vLLM is not installed here")
    model = ensure_tiny_model(ROOT / "var/models/tiny-llama")
    run = BenchmarkRunFactory(snapshot={"tokenizer_dir": str(model)})
    queued = []
    monkeypatch.setattr(
        "evaluations.services.benchmarks._enqueue_cross_check", queued.append
    )  # the replay has its vLLM test
    with django_capture_on_commit_callbacks(execute=True):
        resp = admin_client.post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == 302
    run.refresh_from_db()
    assert run.results["cross_check"]["status"] == "queued" and queued == [run.pk]
    event = AuditEvent.objects.get(action="benchmark_run.cross_check")
    assert event.object_id == str(run.pk) and event.actor == "admin"
    # A second request while the first is queued is refused.
    assert admin_client.post(reverse("evaluations:run_cross_check", args=[run.pk])).status_code == 409


def test_cross_check_of_a_predicted_run_is_refused(admin_client):
    run = BenchmarkRunFactory(kind="predicted")
    resp = admin_client.post(reverse("evaluations:run_cross_check", args=[run.pk]))
    assert resp.status_code == 409 and "predicted run sent no requests" in resp.content.decode()


def _api_body(**workload):
    return {
        "target_kind": "url",
        "base_url": "http://127.0.0.1:9/v1",
        "model_name": "paced",
        "workload": {
            "arrival": {"kind": "poisson", "rate": 1},
            "input": {"kind": "fixed", "value": 8},
            "output": {"kind": "fixed", "value": 8},
            **workload,
        },
        "sla": {"ttft_ms": 500},
        "stage": {"num_requests": 4},
    }


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            {"arrival": {"kind": "poisson", "rate": 0}},
            "workload.arrival.rate (offered req/s): must be more than 0",
        ),
        ({"empirical": [[10, 5], [0, 5]]}, "workload.empirical[1][0] (tokens): must be between 1 and"),
        ({"empirical": [[10, -5]]}, "workload.empirical[0][1] (tokens): must be between 1 and"),
        (
            {"arrival": {"kind": "poisson", "rate": 1, "spacing": "sometimes"}},
            "workload.arrival.spacing: must be one of window, vllm",
        ),
    ],
)
def test_api_refuses_bad_workloads_and_saves_nothing(admin_client, monkeypatch, workload, message):
    monkeypatch.setattr("evaluations.services.benchmarks._enqueue", lambda pk: None)
    body = _api_body(**workload)
    if "empirical" in workload:
        body["workload"].pop("input")
        body["workload"].pop("output")
    resp = admin_client.post(reverse("evaluations-api:run_list"), body, content_type="application/json")
    assert resp.status_code == 400 and message in str(resp.json())
    assert not BenchmarkRun.objects.exists()


def test_lengths_above_the_deployment_context_are_refused_on_the_form(admin_client, monkeypatch):
    monkeypatch.setattr("evaluations.services.benchmarks._enqueue", lambda pk: None)
    dep = DeploymentFactory(max_model_len=1024)
    from .test_views import _form

    resp = admin_client.post(
        reverse("evaluations:run_create"),
        _form(target_kind="deployment", deployment=dep.pk, input_a=1000, output_a=100),
    )
    assert resp.status_code == 400
    page = resp.content.decode()
    assert "max_model_len" in page and ("1,024" in page or "(1024)" in page)
    assert not BenchmarkRun.objects.exists()


def test_rate_zero_on_the_form_is_refused(admin_client):
    from .test_views import _form

    resp = admin_client.post(reverse("evaluations:run_create"), _form(rate=0))
    assert resp.status_code == 400 and not BenchmarkRun.objects.exists()


def test_benchmark_command_cross_check_without_vllm_is_a_clear_error(admin_user, monkeypatch, tmp_path):
    monkeypatch.setattr("loadtest.crosscheck.vllm_cli", lambda: None)
    with (
        paced_server("--ttft-ms", "5", "--tpot-ms", "1") as url,
        pytest.raises(CommandError, match="vLLM is not installed"),
    ):
        call_command(
            "benchmark",
            "--url",
            url,
            "--model",
            "paced",
            "--rate",
            "20",
            "--num-requests",
            "10",
            "--warmup",
            "0",
            "--input-len",
            "16",
            "--output-len",
            "4",
            "--cross-check",
            "vllm",
        )
    run = BenchmarkRun.objects.get()
    assert run.status == "succeeded" and "cross_check" not in run.results


def test_a_predicted_run_says_which_calibration_it_used_and_that_it_has_no_interval(
    admin_user, auditor_client
):
    from evaluations.services.benchmarks import benchmark_run_create, benchmark_run_execute
    from tests.factories import GpuTypeFactory, ModelVersionFactory

    run = benchmark_run_create(
        actor=admin_user,
        kind="predicted",
        model_version=ModelVersionFactory(),
        gpu_type=GpuTypeFactory(),
        workload={
            "arrival": {"kind": "concurrency", "concurrency": 4},
            "input": {"kind": "fixed", "value": 128},
            "output": {"kind": "fixed", "value": 32},
        },
        sla={"ttft_ms": 1000, "tpot_ms": 50},
        stage={"num_requests": 16},
        enqueue=False,
    )
    run = benchmark_run_execute(run_id=run.pk)
    basis = run.results["prediction"]
    assert "not calibrated" in basis["calibration"] and basis["interval_pct"] is None
    assert basis["efficiency"]["mfu"] > 0
    html = auditor_client.get(reverse("evaluations:run_detail", args=[run.pk])).content.decode()
    assert 'id="prediction-basis"' in html and "no held-out measurements" in html
    assert 'id="workload-check"' not in html  # a simulated run sent nothing to check
