"""Workloads a real deployment could never meet are refused (service, API and form), nothing saved."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from evaluations.constants import MAX_RATE_RPS, MAX_TOKENS_PER_REQUEST
from evaluations.models import BenchmarkRun
from evaluations.services.benchmarks import benchmark_run_create
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory

pytestmark = pytest.mark.django_db

ABSURD = {
    "arrival": {"kind": "constant", "rate": 1e12},
    "input": {"kind": "fixed", "value": 10**12},
    "output": {"kind": "fixed", "value": 10**12},
}


def _wl(rate=1.0, inp=64, out=64, **more):
    return {
        "arrival": {"kind": "poisson", "rate": rate},
        "input": {"kind": "fixed", "value": inp},
        "output": {"kind": "fixed", "value": out},
        **more,
    }


def _create(admin_user, **kw):
    defaults = dict(
        actor=admin_user,
        kind="predicted",
        model_version=ModelVersionFactory(model=ModelFactory(max_context=8192)),
        gpu_type=GpuTypeFactory(),
        workload=_wl(),
        sla={"ttft_ms": 1000, "tpot_ms": 50},
        stage={"duration_s": 10},
        enqueue=False,
    )
    defaults.update(kw)
    return benchmark_run_create(**defaults)


def test_a_sane_predicted_run_is_accepted(admin_user):
    assert _create(admin_user).pk


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        ({"workload": ABSURD}, "workload", "req/s"),
        ({"workload": _wl(rate=MAX_RATE_RPS * 2)}, "workload", "req/s"),
        ({"workload": _wl(inp=8000, out=500)}, "workload", "8,192"),  # beyond the model's context
        (
            {"workload": _wl(inp=10**12)},
            "workload",
            "workload.input.value (tokens): must be between 1 and 1,048,576",
        ),
        (
            {"workload": {**_wl(), "arrival": {"kind": "concurrency", "concurrency": 10**9}}},
            "workload",
            "workload.arrival.concurrency (closed-loop clients): must be between 1 and 10,000",
        ),
        ({"workload": {**_wl(), "input": {"kind": "normal", "mean": 100, "std": 1e15}}}, "workload", "std"),
        (
            {"workload": {**_wl(), "input": {"kind": "lognormal", "mean": 100, "sigma": 50}}},
            "workload",
            "sigma",
        ),
        (
            {"workload": {**_wl(), "input": {"kind": "uniform", "low": 1, "high": 10**9}}},
            "workload",
            "workload.input.high (tokens): must be between 1 and 1,048,576",
        ),
        (
            {"workload": {**_wl(), "empirical": [[10**7, 1]], "input": None, "output": None}},
            "workload",
            "empirical",
        ),
        ({"workload": {**_wl(), "empirical_path": "/etc/passwd"}}, "workload", "inline"),
        ({"workload": _wl(prefix_groups=10**9, shared_prefix_ratio=0.5)}, "workload", "prefix_groups"),
        ({"stage": {"num_requests": 10**12}}, "stage", "requests"),
        ({"stage": {"duration_s": 10**9}}, "stage", "duration"),
        ({"stage": {"duration_s": 3600}, "workload": _wl(rate=50_000)}, "stage", "requests in a stage"),
        ({"stage": {"duration_s": 10, "warmup_requests": 10**9}}, "stage", "Warm-up"),
        ({"stage": {"duration_s": 10, "processes": 10**6}}, "stage", "processes"),
        ({"sla": {"ttft_ms": 1e300}}, "sla", "ttft_ms"),
        ({"mode": "ladder", "ladder": [1, 1e12]}, "ladder", "req/s"),
        ({"mode": "sweep", "sweep": {"max_rate": 1e12}}, "sweep", "req/s"),
        ({"mode": "sweep", "sweep": {"max_stages": 10**6}}, "sweep", "stages"),
        ({"tensor_parallel": 10**6}, "gpus", "TP"),
    ],
)
def test_absurd_workloads_are_refused_naming_the_problem(admin_user, kw, field, words):
    with pytest.raises(ValidationError) as exc:
        _create(admin_user, **kw)
    assert field in exc.value.message_dict, exc.value.message_dict
    assert words in " ".join(exc.value.message_dict[field]), exc.value.message_dict
    assert not BenchmarkRun.objects.exists()


def test_a_url_target_is_bounded_by_the_platform_maximum(admin_user):
    with pytest.raises(ValidationError) as exc:
        _create(
            admin_user,
            kind="measured",
            model_version=None,
            gpu_type=None,
            target_kind="url",
            base_url="http://127.0.0.1:9/v1",
            model_name="m",
            workload=_wl(inp=MAX_TOKENS_PER_REQUEST, out=1),
        )
    assert "platform" in exc.value.message_dict["workload"][0]


def test_the_api_answers_400_to_the_absurd_predicted_run(admin_client):
    version = ModelVersionFactory()
    gpu = GpuTypeFactory()
    response = admin_client.post(
        "/api/evaluations/runs/",
        {
            "kind": "predicted",
            "model_version": version.pk,
            "gpu_type": gpu.pk,
            "workload": ABSURD,
            "sla": {"ttft_ms": 1000, "tpot_ms": 50},
            "stage": {"duration_s": 10},
        },
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert "workload" in response.json()
    assert not BenchmarkRun.objects.exists()


def test_the_form_shows_the_bound_and_saves_nothing(admin_client):
    version = ModelVersionFactory(model=ModelFactory(max_context=4096))
    gpu = GpuTypeFactory()
    data = {
        "kind": "predicted",
        "mode": "single",
        "target_kind": "deployment",
        "api": "completions",
        "model_version": version.pk,
        "gpu_type": gpu.pk,
        "tensor_parallel": 1,
        "replicas": 1,
        "arrival": "poisson",
        "rate": 1,
        "burstiness": 1,
        "concurrency": 8,
        "input_kind": "fixed",
        "input_a": 4000,
        "output_kind": "fixed",
        "output_a": 500,
        "shared_prefix_ratio": 0,
        "prefix_groups": 1,
        "temperature": 0,
        "duration_s": 10,
        "warmup_requests": 0,
        "processes": 0,
        "ttft_ms": 1000,
        "tpot_ms": 50,
        "target_attainment": 0.9,
        "max_rate": 100,
        "rel_tol": 0.05,
        "max_stages": 10,
    }
    response = admin_client.post("/benchmarks/new/", data)
    assert response.status_code == 400
    assert "exceeds 4,096 tokens" in response.content.decode()
    data.update(input_a=10**12, rate=10**12)
    response = admin_client.post("/benchmarks/new/", data)
    assert response.status_code == 400
    assert "less than or equal to" in response.content.decode()
    assert not BenchmarkRun.objects.exists()
