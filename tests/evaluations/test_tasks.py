"""A benchmark started like the console starts it: committed row, Celery task, real worker process."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from evaluations.models import BenchmarkRun
from evaluations.services.benchmarks import benchmark_run_cancel, benchmark_run_create
from tests.factories import GpuTypeFactory
from tests.support.servers import paced_server

WL = {
    "arrival": {"kind": "constant", "rate": 4.0},
    "input": {"kind": "fixed", "value": 16},
    "output": {"kind": "fixed", "value": 20},
}


def _wait(run_id: int, statuses: tuple[str, ...], timeout_s: float = 90.0) -> BenchmarkRun:
    deadline = time.monotonic() + timeout_s
    seen_progress = set()
    while time.monotonic() < deadline:
        run = BenchmarkRun.objects.get(pk=run_id)
        seen_progress.add(run.progress)
        if run.status in statuses:
            run.seen_progress = seen_progress
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still {run.status} ({run.progress_message}) after {timeout_s} s")


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_celery_worker_runs_a_benchmark_and_saves_progress_on_the_row(celery_worker_process, admin_user):
    with paced_server("--ttft-ms", "30", "--tpot-ms", "10") as url:
        run = benchmark_run_create(
            actor=admin_user,
            target_kind="url",
            base_url=url,
            model_name="paced",
            mode="ladder",
            ladder=[4, 8],
            workload=WL,
            sla={"ttft_ms": 500, "tpot_ms": 30},
            stage={"duration_s": 2.0, "warmup_requests": 1},
        )  # autocommit: on_commit fires at once and the task goes to the worker's queue
        run = _wait(run.pk, ("succeeded", "failed"))
    assert run.status == "succeeded", run.error
    assert run.task_id
    assert any(0 < p < 100 for p in run.seen_progress), run.seen_progress  # progress saved while it ran
    assert [s["level"] for s in run.results["stages"]] == [4.0, 8.0]
    # The server paces tokens 10 ms apart, so no TPOT can be below that; how far above is machine load.
    assert run.results["stages"][1]["tpot_ms"]["mean"] >= 9.9


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_benchmark_stops_it(celery_worker_process, admin_user):
    with paced_server("--ttft-ms", "30", "--tpot-ms", "10") as url:
        run = benchmark_run_create(
            actor=admin_user,
            target_kind="url",
            base_url=url,
            model_name="paced",
            workload=WL,
            sla={"ttft_ms": 500},
            stage={"duration_s": 60.0},
        )
        _wait(run.pk, ("running",))
        # Cancel once the stage is sending (its progress moved), not after a fixed sleep.
        deadline = time.monotonic() + 60
        while BenchmarkRun.objects.get(pk=run.pk).progress == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        log = celery_worker_process["log"]
        finished_before = log.read_text().count("succeeded in")
        assert benchmark_run_cancel(run=run, actor=admin_user)
        started = time.monotonic()
        # The worker notices, stops sending and returns normally: well before the 60 s stage ends
        # (how fast is not this test's business on a busy machine).
        while log.read_text().count("succeeded in") == finished_before and time.monotonic() - started < 50:
            time.sleep(0.2)
        stopped_after = time.monotonic() - started
    run.refresh_from_db()
    assert run.status == "cancelled" and run.results == {}
    assert stopped_after < 50, "the task ran on after the cancel"


@pytest.mark.process
@pytest.mark.django_db
def test_manage_py_benchmark_prints_a_table_and_writes_json(tmp_path, admin_user):
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "report.json"
    with paced_server("--ttft-ms", "40", "--tpot-ms", "10") as url:
        call_command(
            "benchmark",
            "--url", url, "--model", "paced", "--arrival", "constant", "--rate", "5", "--num-requests", "10",
            "--input-len", "16", "--output-len", "uniform:10:20", "--warmup", "1",
            "--gpu-type", str(GpuTypeFactory().pk), "--gpus", "1",
            "--json", str(path), stdout=out, stderr=err,
        )  # fmt: skip
    text = out.getvalue()
    assert "succeeded" in text and "TTFT p50" in text
    assert "%" in err.getvalue() and "[" in err.getvalue()  # the progress bar
    report = json.loads(path.read_text())
    # What the table says of capacity is what the report holds. Whether the one stage counts is the
    # host's business: a starved client (a loaded machine) marks it CLIENT-BOUND and prices nothing.
    cap, stage = report["results"]["capacity"], report["results"]["stages"][0]
    if cap["rate"] is not None:
        assert cap["rate"] == 5 and "capacity goodput: 5 req/s" in text and "per M output tokens" in text
    else:
        assert "capacity goodput:" not in text and "\n! " in "\n" + text  # the reason, as a warning
        assert stage["client_bound"] == ("CLIENT-BOUND" in text)
    assert report["results"]["stages"][0]["requests"] == 10
    run = BenchmarkRun.objects.get(pk=report["id"])
    assert run.status == "succeeded" and run.created_by == admin_user
