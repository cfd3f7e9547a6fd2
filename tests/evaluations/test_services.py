"""Benchmark services end to end: create → execute (in-process) → stored report, against real servers."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from evaluations.models import BenchmarkRun
from evaluations.services.benchmarks import benchmark_run_cancel, benchmark_run_create, benchmark_run_execute
from tests.factories import GpuTypeFactory, ModelVersionFactory
from tests.support.servers import free_port, paced_server

from .factories import DeploymentFactory

pytestmark = pytest.mark.django_db

WL = {
    "arrival": {"kind": "constant", "rate": 10.0},
    "input": {"kind": "fixed", "value": 16},
    "output": {"kind": "fixed", "value": 16},
}


def _create(admin_user, **kw):
    defaults = dict(
        actor=admin_user,
        target_kind="url",
        model_name="paced",
        workload=WL,
        sla={"ttft_ms": 500, "tpot_ms": 30},
        stage={"duration_s": 1.0, "warmup_requests": 2},
        enqueue=False,
    )
    defaults.update(kw)
    return benchmark_run_create(**defaults)


@pytest.mark.process
def test_measured_run_against_a_url_stores_a_complete_report(admin_user):
    gpu = GpuTypeFactory()
    version = ModelVersionFactory(precision="fp8", framework="vllm")
    with paced_server("--ttft-ms", "50", "--tpot-ms", "10") as url:
        run = _create(
            admin_user,
            base_url=url,
            gpu_type=gpu,
            model_version=version,
            gpus=2,
            stage={"num_requests": 10, "warmup_requests": 2},
            # Generous limits: this test is about the report, not whether a busy CI machine meets
            # a tight SLA (every request must be good for the capacity and cost figures below).
            sla={"ttft_ms": 10_000, "tpot_ms": 2_000},
        )
        seen = []
        run = benchmark_run_execute(run_id=run.pk, on_progress=lambda f, m: seen.append(f))
    assert run.status == "succeeded", run.error
    assert run.progress == 100 and run.started_at and run.finished_at
    assert seen and max(seen) == 1.0
    r = run.results
    st = r["stages"][0]
    assert st["requests"] == 10 and st["failed"] == 0
    # The figures are the stage's own (the server paces the first token at 50 ms, so TTFT cannot be
    # shorter). How close TPOT and TTFT come to the true 10/50 ms is a benchmark figure
    # (python -m benchmarks.harness, "Known timings"): a busy machine bunches tokens and shifts it.
    assert st["ttft_ms"]["p50"] >= 45 and 0 < st["tpot_ms"]["mean"] < st["e2e_ms"]["p50"]
    # Snapshot of what was under test, and the cost basis from the GPU type's price.
    assert run.snapshot["precision"] == "fp8" and run.snapshot["framework"] == "vllm"
    assert run.snapshot["gpus"] == 2 and run.snapshot["gpu_type"] == gpu.name
    cost = r["cost"]
    assert cost["available"] and cost["usd_per_hour"] == pytest.approx(2 * 2.49)
    expected = 2 * 2.49 / (r["capacity"]["token_goodput"] * 3600) * 1e6
    assert cost["usd_per_mtok_output"] == pytest.approx(expected)
    assert run.usd_per_mtok == pytest.approx(expected)
    assert r["capacity"]["per_gpu"]["token_goodput"] == pytest.approx(r["capacity"]["token_goodput"] / 2)
    assert run.capacity_rps == 10.0 and run.attainment == 1.0
    assert run.series and {"t", "running", "stage"} <= set(run.series[0])


@pytest.mark.process
def test_measured_run_on_a_deployment_goes_through_its_serve_route(admin_user, settings):
    with paced_server("--ttft-ms", "20", "--tpot-ms", "5") as url:
        settings.RAY_SERVE_URL = url[: -len("/v1")]  # the paced server answers under /d/<slug>/v1 too
        dep = DeploymentFactory()
        run = _create(
            admin_user, target_kind="deployment", deployment=dep, model_name="", stage={"num_requests": 10}
        )
        assert run.base_url.endswith(f"/d/{dep.slug}/v1") and run.model_name == "paced"
        run = benchmark_run_execute(run_id=run.pk)
    assert run.status == "succeeded", run.error
    assert run.snapshot["deployment"] == dep.name and run.snapshot["gpus"] == 2
    assert run.snapshot["parallelism"] == "TP=2 × 1 replica"
    assert run.results["stages"][0]["completed"] == 10


@pytest.mark.process
def test_unreachable_endpoint_run_completes_and_says_so(admin_user):
    run = _create(admin_user, base_url=f"http://127.0.0.1:{free_port()}/v1", stage={"num_requests": 5})
    run = benchmark_run_execute(run_id=run.pk)
    assert run.status == "succeeded"
    assert run.results["totals"]["errors"] == {"connect_error": 5}
    assert "5 of 5 requests failed" in run.progress_message and "connect_error 5" in run.progress_message
    assert any("No stage met the SLA" in w for w in run.results["warnings"])
    assert run.usd_per_mtok is None


@pytest.mark.slow  # minutes of a busy machine's time: outside --fast
def test_ladder_run_reports_every_level_and_best_passing_level(admin_user):
    with paced_server(
        "--ttft-ms", "20", "--tpot-ms", "5", "--fault", "http_400", "--fault-every", "5"
    ) as url:
        run = _create(admin_user, base_url=url, mode="ladder", ladder=[5, 10], stage={"num_requests": 10})
        run = benchmark_run_execute(run_id=run.pk)
    assert run.status == "succeeded", run.error
    levels = [s["level"] for s in run.results["stages"]]
    assert levels == [5.0, 10.0]
    assert run.results["totals"]["errors"] == {"http_4xx": 4}
    assert "http_4xx 4" in run.progress_message
    assert run.results["capacity"]["method"] == "best_stage"


def test_predicted_sweep_for_a_deployment_spec(admin_user):
    dep = DeploymentFactory(tensor_parallel_size=1, num_replicas=2)
    run = benchmark_run_create(
        actor=admin_user,
        kind="predicted",
        mode="sweep",
        deployment=dep,
        workload={
            "arrival": {"kind": "poisson", "rate": 1.0},
            "input": {"kind": "fixed", "value": 512},
            "output": {"kind": "fixed", "value": 128},
        },
        sla={"ttft_ms": 1000, "tpot_ms": 50},
        sweep={"start_rate": 4, "rel_tol": 0.1, "max_stages": 10},
        stage={"duration_s": 20},
        enqueue=False,
    )
    run = benchmark_run_execute(run_id=run.pk)
    assert run.status == "succeeded", run.error
    assert run.kind == "predicted" and run.results["kind"] == "predicted"
    cap = run.results["capacity"]
    assert cap["method"] == "sweep" and cap["rate"] > 4
    assert run.results["sweep"]["converged"]
    assert cap["gpus"] == 2 and cap["per_gpu"]["rate"] == pytest.approx(cap["rate"] / 2)
    assert run.usd_per_mtok > 0
    # Every stage below capacity passed, every one above failed.
    for p in run.results["curve"]:
        assert p["passed"] == (p["level"] <= cap["rate"])


def test_predicted_run_from_a_version_and_gpu_without_a_deployment(admin_user):
    run = benchmark_run_create(
        actor=admin_user,
        kind="predicted",
        model_version=ModelVersionFactory(),
        gpu_type=GpuTypeFactory(),
        tensor_parallel=1,
        workload={
            "arrival": {"kind": "concurrency", "concurrency": 8},
            "input": {"kind": "fixed", "value": 256},
            "output": {"kind": "fixed", "value": 64},
        },
        sla={"ttft_ms": 1000, "tpot_ms": 50},
        stage={"num_requests": 64},
        enqueue=False,
    )
    run = benchmark_run_execute(run_id=run.pk)
    assert run.status == "succeeded", run.error
    assert run.results["stages"][0]["completed"] == 64
    assert run.results["stages"][0]["tpot_ms"]["p50"] > 0


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"workload": {"arrival": {"kind": "constant", "rate": -1}}}, "workload"),
        ({"sla": {"ttft_ms": None, "tpot_ms": None}}, "sla"),
        ({"stage": {"duration_s": None, "num_requests": None}}, "stage"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"mode": "ladder", "ladder": []}, "ladder"),
        ({"target_kind": "deployment"}, "deployment"),
        ({"kind": "predicted"}, "deployment"),
        (
            {
                "mode": "sweep",
                "workload": {
                    "arrival": {"kind": "concurrency", "concurrency": 4},
                    "input": {"kind": "fixed", "value": 8},
                    "output": {"kind": "fixed", "value": 8},
                },
            },
            "workload",
        ),
    ],
)
def test_bad_input_is_rejected_with_a_field_error(admin_user, kw, field):
    with pytest.raises(ValidationError) as exc:
        _create(admin_user, **{"base_url": "http://127.0.0.1:9/v1", **kw})
    assert field in exc.value.message_dict
    assert not BenchmarkRun.objects.exists()


def test_execute_is_idempotent_and_cancel_stops_a_queued_run(admin_user):
    run = _create(admin_user, base_url="http://127.0.0.1:9/v1")
    assert benchmark_run_cancel(run=run, actor=admin_user)
    assert run.status == "cancelled"
    run = benchmark_run_execute(run_id=run.pk)  # not queued any more: nothing happens
    assert run.status == "cancelled" and run.results == {}
    assert not benchmark_run_cancel(run=run, actor=admin_user)


def test_running_run_without_heartbeat_is_failed_by_the_reaper(admin_user):
    from datetime import timedelta

    from django.utils import timezone

    from core.lifecycle import runs_reap_stale

    alive = _create(admin_user, base_url="http://127.0.0.1:9/v1")
    dead = _create(admin_user, base_url="http://127.0.0.1:9/v1")
    now = timezone.now()
    BenchmarkRun.objects.filter(pk=alive.pk).update(status="running", heartbeat_at=now - timedelta(seconds=5))
    BenchmarkRun.objects.filter(pk=dead.pk).update(status="running", heartbeat_at=now - timedelta(minutes=5))
    assert runs_reap_stale(BenchmarkRun) == 1
    alive.refresh_from_db()
    dead.refresh_from_db()
    assert alive.status == "running"
    assert dead.status == "failed" and "worker" in dead.error and dead.finished_at
