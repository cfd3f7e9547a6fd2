"""Gates run by a real Celery worker against simulated engine processes, and the admin's browser flow.

Three simulated engines (a bf16 baseline, an FP8 candidate close to it, an INT4 candidate that is
poor at JSON extraction) answer behind a router that maps ``/d/<slug>`` like Ray Serve's proxy; a
Celery worker of this module's own points ``RAY_SERVE_URL`` at it.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from playwright.sync_api import expect

from audit.models import AuditEvent
from evalkit import builtin
from evalkit.suites import dump_jsonl
from evaluations.models import GateDecision, GateRun
from evaluations.services.evals import eval_suite_upload
from evaluations.services.gates import gate_policy_save, gate_run_start
from tests.conftest import subprocess_env
from tests.evaluations.factories import DeploymentFactory
from tests.evaluations.gate_fixtures import policy_body
from tests.factories import ModelVersionFactory
from tests.support.browser import login
from tests.support.celery_worker import celery_worker
from tests.support.servers import prefix_router, simulated_engine

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process

BASELINE = {"categories": {"arithmetic": 0.96, "json_extraction": 0.94}, "default": 0.93}
FP8 = {"categories": {"arithmetic": 0.95, "json_extraction": 0.93}, "default": 0.92}
POOR = {"categories": {"arithmetic": 0.95, "json_extraction": 0.5}, "default": 0.9}


@pytest.fixture(scope="module")
def gate_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    queue = f"governor-gates-test-{os.getpid()}"
    with (
        simulated_engine(model_name="paced", quality=BASELINE) as bf16,
        simulated_engine(model_name="paced", quality=FP8) as fp8,
        simulated_engine(model_name="paced", quality=POOR) as int4,
        prefix_router({"gate-bf16": bf16, "gate-fp8": fp8, "gate-int4": int4}) as router,
    ):
        with django_db_blocker.unblock():
            env = subprocess_env(CELERY_TASK_DEFAULT_QUEUE=queue, RAY_SERVE_URL=router)
        log_path = tmp_path_factory.mktemp("gates-worker") / "worker.log"
        with celery_worker(
            env=env, queue=queue, log_path=log_path, name=f"gates-test-{os.getpid()}"
        ) as worker:
            yield {**worker, "router": router}


@pytest.fixture
def gated(gate_worker, baseline, candidate, gpu, admin_user, settings):
    """The module's engines' versions, deployments, a 160-case suite and a policy on the H100."""
    settings.RAY_SERVE_URL = gate_worker["router"]
    baseline.quality_profile = BASELINE
    baseline.save()
    candidate.quality_profile = FP8
    candidate.save()
    poor = ModelVersionFactory(model=baseline.model, label="int4-rtn", precision="w4a16", lifecycle="candidate",
                               baseline=baseline, quality_profile=POOR)  # fmt: skip
    common = dict(engine_kind="simulated", gpu_type=gpu, tensor_parallel_size=1, status="RUNNING")
    for version, slug in ((baseline, "gate-bf16"), (candidate, "gate-fp8"), (poor, "gate-int4")):
        DeploymentFactory(model_version=version, slug=slug, **common)
    cases = builtin.generate("arithmetic", seed=7, n=80) + builtin.generate("json_extraction", seed=7, n=80)
    eval_suite_upload(name="gate-core", content=dump_jsonl(cases), actor=admin_user)
    body = policy_body()
    body["quality"] = {"required": True, "suite": "gate-core", "baseline": "serving",
                       "default": {"max_drop": 0.15, "min_score": 0.6}}  # fmt: skip
    body["performance"].update(max_p95_ttft_ms=10_000, max_p95_tpot_ms=500)
    policy = gate_policy_save(model=baseline.model, gpu_type=gpu, actor=admin_user, **body)
    return {"policy": policy, "fp8": candidate, "poor": poor}


def _wait_run(run_id: int, timeout_s: float = 240.0) -> GateRun:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = GateRun.objects.get(pk=run_id)
        if run.status in ("done", "error"):
            return run
        time.sleep(0.3)
    raise AssertionError(f"gate run {run_id} still {run.status} ({run.progress_message}) after {timeout_s} s")


@pytest.mark.django_db(transaction=True)
def test_worker_runs_the_fp8_gates_to_a_pass_and_the_poor_version_fails_on_its_category(gated, admin_user):
    run = gate_run_start(version=gated["fp8"], actor=admin_user)  # autocommit: enqueued at once
    run = _wait_run(run.pk)
    assert run.status == "done" and run.task_id
    decisions = {d.kind: d for d in GateDecision.objects.filter(gate_run=run)}
    assert {k: d.verdict for k, d in decisions.items()} == {
        "quality": "passed", "performance": "passed", "stability": "passed"
    }, {k: d.summary for k, d in decisions.items()}  # fmt: skip
    q = decisions["quality"]
    assert q.label == "simulated" and q.eval_run.case_results.count() == 160
    assert q.measured["comparison"]["json_extraction"]["low"] >= -0.15
    assert decisions["performance"].label == "predicted" and decisions["stability"].label == "predicted"

    run = _wait_run(gate_run_start(version=gated["poor"], actor=admin_user, kinds=["quality"]).pk)
    poor = GateDecision.objects.get(gate_run=run)
    assert poor.verdict == "failed" and "json_extraction: drop vs baseline" in poor.summary
    assert "arithmetic: drop" not in poor.summary  # only the broken category fails
    # The baseline's eval on the same suite version was reused, not rerun.
    assert poor.baseline_eval_run_id == decisions["quality"].baseline_eval_run_id


@pytest.mark.django_db(transaction=True)
def test_admin_starts_an_eval_run_that_the_worker_scores_by_category(gated, admin_client):
    from django.urls import reverse

    from evaluations.models import EvalRun, EvalSuite

    suite = EvalSuite.objects.get(name="gate-core")
    dep = gated["poor"].deployments.get()
    r = admin_client.post(
        reverse("gates:evalrun_start", args=[suite.pk]), {"deployment": dep.pk, "concurrency": 8, "seed": 1}
    )
    run = EvalRun.objects.get()
    assert r["Location"] == run.get_absolute_url()
    deadline = time.monotonic() + 120
    while EvalRun.objects.get(pk=run.pk).status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.3)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert run.label == "simulated" and run.task_id and run.cases_done == 160 and run.cases_failed == 0
    assert run.scores["json_extraction"]["mean"] < 0.7 < run.scores["arithmetic"]["mean"]
    assert (
        run.scores["json_extraction"]["low"]
        < run.scores["json_extraction"]["mean"]
        < run.scores["json_extraction"]["high"]
    )
    html = admin_client.get(run.get_absolute_url() + "?category=json_extraction&failed=on").content.decode()
    assert "json_extraction" in html and "table-danger" in html


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_admin_runs_gates_promotes_fp8_and_overrides_a_blocked_version(gated, page, live_server, admin_user):
    base = live_server.url
    login(page, base, admin_user.username)
    fp8, poor = gated["fp8"], gated["poor"]
    page.goto(f"{base}{fp8.get_absolute_url()}")
    page.wait_for_selector("#gate-run-form")
    assert page.locator("#blocked-approved").is_visible()
    page.click("#run-gates")
    page.wait_for_selector("[data-gate-run][data-status=running], [data-gate-run][data-status=queued]")
    # The panel polls; when the run ends the page reloads with the verdicts and the buttons they allow.
    page.wait_for_selector("#gates-status:has-text('every required gate passed')", timeout=240_000)
    for kind in ("quality", "performance", "stability"):
        assert page.locator(f"tr[data-gate={kind}]").get_attribute("data-verdict") == "passed"
    assert page.locator("#gate-checklist a[href*='/gates/evals/']").count() >= 2
    assert page.locator("#gate-checklist a[href*='/benchmarks/']").count() >= 2
    assert page.locator("#gate-checklist .badge-simulated").count() == 1
    assert page.locator("#gate-checklist .badge-predicted").count() == 2
    chart = page.locator("#chart-quality")
    chart.wait_for(state="attached", timeout=30_000)
    data = json.loads(chart.get_attribute("data-chart"))
    assert data["categories"] and all(data["candidate"]) and all(data["baseline"]), data
    expect(chart).to_have_attribute("data-drawn", "1", timeout=30_000)
    page.click("button[data-move=approved]")
    page.wait_for_selector("h1 [data-lifecycle=approved]")
    assert AuditEvent.objects.filter(action="model_version.transition", object_id=str(fp8.pk)).exists()

    page.goto(f"{base}{poor.get_absolute_url()}")
    page.wait_for_selector("#gate-run-form")
    page.check("#gate-run-form input[value=quality]")
    page.click("#run-gates")
    page.wait_for_selector("tr[data-gate=quality][data-verdict=failed]", timeout=240_000)
    assert "json_extraction" in page.inner_text("#blocked-approved")
    assert page.locator("tr.table-danger[data-check^='json_extraction']").count() >= 1
    assert page.locator("button[data-move=approved]").count() == 0
    page.fill("#override-reason", "Accepted by the product owner for the batch pool only")
    page.click("#override-form button[type=submit]")
    page.wait_for_selector("#override-banner")
    assert "Accepted by the product owner" in page.inner_text("#override-banner")
    assert page.locator("h1 [data-lifecycle=approved]").is_visible()
    event = AuditEvent.objects.get(action="model_version.gate_override", object_id=str(poor.pk))
    assert event.actor == admin_user.username and event.reason.startswith("Accepted")
