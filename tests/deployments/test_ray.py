"""Deployments on a real, private Ray cluster, reconciled by a real Celery worker.

The scenario of the issue: create a simulated deployment → RUNNING → stream a completion through
Ray Serve's HTTP proxy with the ``openai`` client; scale 1 → 2 and see two replicas; a bad import
path and a bad engine argument end as DEPLOY_FAILED with Ray's message while the healthy one keeps
serving; delete → gone from Ray, others untouched; Ray unreachable → UNKNOWN, then recovery;
two reconciles never interleave.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import httpx
import openai
import psycopg
import pytest
from django.db import connection, connections
from django.test import override_settings

from catalog.models import GpuType
from deployments import reconciler, services
from deployments.models import Deployment, ReconcileRun
from deployments.ray_client import RayUnreachable
from deployments.reconciler import LOCK_KEY, deployments_reconcile
from tests.conftest import test_database_url
from tests.deployments.conftest import wait_for
from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.slow]


def _create(admin, slug: str, **extra) -> Deployment:
    fields = dict(
        name=slug,
        slug=slug,
        model_version=llama_8b_version(),
        engine_kind="simulated",
        gpu_type=GpuType.objects.filter(name="H100 SXM").first() or GpuTypeFactory(),
        served_model_name="llama-sim",
        max_model_len=8192,
        max_num_seqs=32,
        max_num_batched_tokens=8192,
        # 20x faster than real time keeps the test quick; the engine still streams token by token.
        time_scale=0.05,
    )
    fields.update(extra)
    deployment, _ = services.deployment_create(actor=admin, **fields)
    return deployment


def _status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def _ray_apps(cluster) -> dict:
    return cluster.serve_status().get("applications") or {}


def test_unreachable_cluster_shows_unknown_and_recovers(ray_env, void_queue, admin_user):
    # In-process reconciles: the worker is not needed to prove what one run stores.
    deployment = _create(admin_user, "flaky")
    with override_settings(RAY_DASHBOARD_URL="http://127.0.0.1:9"), pytest.raises(RayUnreachable):
        deployments_reconcile(trigger="test")
    assert _status(deployment) == "UNKNOWN"
    assert "Cluster unreachable" in deployment.status_message
    assert ReconcileRun.objects.order_by("-id").first().outcome == "unreachable"

    # Ray is back: the next run (a retry or the beat tick) re-sends the config and sees the app.
    deployments_reconcile(trigger="test")
    wait_for(
        lambda: deployments_reconcile(trigger="test") and _status(deployment) == "RUNNING",
        timeout=180,
        interval=1,
        what="flaky RUNNING after recovery",
    )
    kinds = list(
        deployment.events.filter(kind="status").order_by("id").values_list("after__status", flat=True)
    )
    assert "UNKNOWN" in kinds and kinds[-1] == "RUNNING"


def test_reconcile_is_idempotent_and_skips_unchanged_configs(ray_env, void_queue, admin_user):
    _create(admin_user, "steady")
    first = deployments_reconcile(trigger="test")
    assert first.outcome == "applied"
    second = deployments_reconcile(trigger="test")
    assert second.outcome == "unchanged"
    assert second.config_hash == first.config_hash


def test_zero_desired_deployments_sends_an_empty_list(ray_env, void_queue):
    run = deployments_reconcile(trigger="test")
    assert run.applications == 0
    wait_for(lambda: _ray_apps(ray_env) == {}, timeout=120, what="no apps on Ray")
    # Serve itself stays up (an empty PUT, never a DELETE that would shut Serve down).
    assert httpx.get(f"{ray_env.dashboard_url}/api/serve/applications/", timeout=10).json()["controller_info"]


def test_a_reconcile_waits_for_the_lock_held_elsewhere(ray_env, void_queue):
    holder = psycopg.connect(test_database_url(), autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
    result = {}

    def run():
        try:
            result["run"] = deployments_reconcile(trigger="blocked")
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # The run's row exists before it asks for the lock; once it is there, give it a moment in
        # which it must not get in (a negative can only be watched for a while).
        wait_for(
            lambda: ReconcileRun.objects.filter(trigger="blocked").exists(),
            timeout=60,
            what="the blocked run",
        )
        time.sleep(1.0)
        blocked = ReconcileRun.objects.get(trigger="blocked")
        assert blocked.locked_at is None, "entered the critical section while another session held the lock"
    finally:
        holder.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        holder.close()
    thread.join(60)
    assert result["run"].locked_at is not None and result["run"].finished_at is not None


def test_a_run_is_stamped_finished_before_it_gives_up_the_lock(ray_env, void_queue, admin_user, monkeypatch):
    """The next run may take the lock the moment it is released, so the finish stamp (which orders
    runs for the "last accepted config" check) must already be stored by then, whatever the timing."""
    _create(admin_user, "stamped")
    held = reconciler.reconcile_lock
    stamped_while_held = []

    @contextmanager
    def watched_lock(**kwargs):
        with held(**kwargs):
            yield
            run = ReconcileRun.objects.get(trigger="stamped")
            stamped_while_held.append(run.finished_at is not None and run.finished_at >= run.locked_at)

    monkeypatch.setattr(reconciler, "reconcile_lock", watched_lock)
    deployments_reconcile(trigger="stamped")
    assert stamped_while_held == [True]


def test_concurrent_reconciles_never_interleave(ray_env, void_queue, admin_user):
    _create(admin_user, "busy")
    errors = []

    def run(i):
        try:
            deployments_reconcile(trigger=f"concurrent-{i}")
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    runs = list(ReconcileRun.objects.filter(trigger__startswith="concurrent-").order_by("locked_at"))
    assert len(runs) == 4
    for earlier, later in zip(runs, runs[1:], strict=False):
        assert earlier.finished_at <= later.locked_at, f"{earlier} and {later} overlapped"
    # Exactly one of them sent the config; the others found it already there.
    assert [r.outcome for r in runs].count("applied") == 1
    connection.close()


def test_demo_deployments_come_up_running(ray_env, void_queue):
    from governor.demo import seed_demo

    seed_demo()
    deployments_reconcile(trigger="test")
    demo = list(Deployment.objects.live())
    # Two routed deployments, and the two candidate deployments of the eval-gates demo.
    assert len(demo) == 4 and sum(1 for d in demo if d.route_targets.exists()) == 2
    wait_for(
        lambda: deployments_reconcile(trigger="test") and all(_status(d) == "RUNNING" for d in demo),
        timeout=300,
        interval=1,
        what="every demo deployment RUNNING",
    )


# Last in the module: from here on a worker consumes this module's tasks.
def test_deploy_stream_scale_break_and_delete(ray_env, deployments_worker, admin_user):
    started = time.monotonic()
    good = _create(admin_user, "good")
    wait_for(lambda: _status(good) == "RUNNING", timeout=240, what="good RUNNING")
    deploy_s = time.monotonic() - started
    print(f"\ndeploy-to-RUNNING: {deploy_s:.1f} s")
    assert good.running_replicas == 1
    assert good.ray_app_status == "RUNNING"
    assert list(good.events.values_list("kind", flat=True).order_by("id"))[:1] == ["created"]
    assert good.events.filter(kind="status", after__status="RUNNING").exists()

    # Stream a completion through Ray Serve's HTTP proxy at the deployment's OpenAI base URL.
    assert good.openai_base_url == f"{ray_env.serve_url}/d/good/v1"
    client = openai.OpenAI(base_url=good.openai_base_url, api_key="unused", max_retries=0, timeout=60)
    chunks = list(
        client.completions.create(
            model="llama-sim",
            prompt="Hello",
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text_chunks = [c for c in chunks if c.choices and c.choices[0].text]
    assert len(text_chunks) >= 2
    assert chunks[-1].usage.completion_tokens == 8

    # Scale 1 → 2: Ray resizes the engine deployment without rebuilding the app.
    started = time.monotonic()
    services.deployment_scale(deployment=good, actor=admin_user, scaling_mode="fixed", num_replicas=2)
    wait_for(
        lambda: _status(good) == "RUNNING" and good.running_replicas == 2, timeout=180, what="2 replicas"
    )
    print(f"scale 1→2: {time.monotonic() - started:.1f} s")
    (engine,) = [d for d in good.ray_deployments if d["name"] == "SimulatedVLLM"]
    assert [r["state"] for r in engine["replicas"]] == ["RUNNING", "RUNNING"]

    # Broken configs: each fails alone with Ray's own message.
    bad_import = _create(admin_user, "bad-import", import_path_override="governor_no_such_module:build_app")
    bad_arg = _create(admin_user, "bad-arg", extra_engine_args={"no_such_engine_arg": 1})
    wait_for(lambda: _status(bad_import) == "DEPLOY_FAILED", timeout=180, what="bad-import DEPLOY_FAILED")
    wait_for(lambda: _status(bad_arg) == "DEPLOY_FAILED", timeout=180, what="bad-arg DEPLOY_FAILED")
    assert "governor_no_such_module" in bad_import.last_error
    assert "no_such_engine_arg" in bad_arg.last_error
    assert _status(good) == "RUNNING" and good.running_replicas == 2
    apps = _ray_apps(ray_env)
    assert apps["bad-import"]["status"] == "DEPLOY_FAILED"
    assert apps["good"]["status"] == "RUNNING"
    # The healthy one still answers.
    assert (
        client.completions.create(model="llama-sim", prompt="again", max_tokens=2).usage.completion_tokens
        == 2
    )

    # Delete → gone from Ray; the others stay.
    services.deployment_delete(deployment=bad_import, actor=admin_user)
    wait_for(lambda: "bad-import" not in _ray_apps(ray_env), timeout=120, what="bad-import gone from Ray")
    wait_for(lambda: _status(bad_import) == "DELETED", timeout=60, what="bad-import DELETED")
    apps = _ray_apps(ray_env)
    assert set(apps) == {"good", "bad-arg"}
    assert apps["good"]["status"] == "RUNNING"
    assert _status(good) == "RUNNING"

    # Stop → Ray drops the app, the row stays STOPPED.
    services.deployment_stop(deployment=bad_arg, actor=admin_user)
    wait_for(lambda: _status(bad_arg) == "STOPPED", timeout=120, what="bad-arg STOPPED")
    assert set(_ray_apps(ray_env)) == {"good"}
