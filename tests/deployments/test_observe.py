"""How Ray's ``GET /api/serve/applications/`` answer lands on the rows (shapes as Ray 2.60 sends them)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from deployments.reconciler import _store_observation
from tests.deployments.factories import DeploymentFactory

pytestmark = pytest.mark.django_db


def ray_app(
    status: str, *, replicas: tuple[str, ...] = ("RUNNING",), message: str = "", dep_message: str = ""
):
    return {
        "name": "x",
        "route_prefix": "/d/x",
        "status": status,
        "message": message,
        "deployments": {
            "SimulatedVLLM": {
                "name": "SimulatedVLLM",
                "status": "HEALTHY" if status == "RUNNING" else "UPDATING",
                "status_trigger": "CONFIG_UPDATE_COMPLETED",
                "message": dep_message,
                "target_num_replicas": len(replicas),
                "replicas": [
                    {
                        "replica_id": f"r{i}",
                        "state": s,
                        "node_ip": "127.0.0.1",
                        "pid": 100 + i,
                        "start_time_s": 1.0,
                    }
                    for i, s in enumerate(replicas)
                ],
            }
        },
    }


def test_running_app_sets_status_replicas_and_one_event():
    d = DeploymentFactory(slug="a")
    moving = _store_observation(
        {"applications": {"a": ray_app("RUNNING", replicas=("RUNNING", "STARTING"))}}, invalid={}, rejected=""
    )
    d.refresh_from_db()
    assert (d.status, d.running_replicas, d.ray_app_status) == ("RUNNING", 1, "RUNNING")
    assert d.ray_deployments[0]["replicas"][1]["state"] == "STARTING"
    assert not moving
    _store_observation({"applications": {"a": ray_app("RUNNING")}}, invalid={}, rejected="")
    assert d.events.filter(kind="status").count() == 1


def test_deploy_failed_keeps_rays_message_as_last_error():
    d = DeploymentFactory(slug="b")
    _store_observation(
        {
            "applications": {
                "b": ray_app(
                    "DEPLOY_FAILED", replicas=(), message="Deploying app 'b' failed", dep_message="boom"
                )
            }
        },
        invalid={},
        rejected="",
    )
    d.refresh_from_db()
    assert d.status == "DEPLOY_FAILED"
    assert "failed" in d.last_error and "SimulatedVLLM: boom" in d.last_error
    assert d.last_error_at is not None


def test_deploying_app_keeps_the_watcher_going():
    DeploymentFactory(slug="c")
    assert _store_observation(
        {"applications": {"c": ray_app("DEPLOYING", replicas=("STARTING",))}}, invalid={}, rejected=""
    )


def test_invalid_config_failure_survives_a_status_only_read():
    d = DeploymentFactory(slug="d")
    _store_observation({"applications": {}}, invalid={d.pk: "bad"}, rejected="")
    _store_observation({"applications": {}}, invalid={}, rejected="")
    d.refresh_from_db()
    assert d.status == "DEPLOY_FAILED" and d.status_message == "bad"


def test_stopped_and_deleted_rows_settle_when_ray_drops_the_app():
    stopped = DeploymentFactory(slug="e", desired_state="stopped", status="RUNNING")
    deleted = DeploymentFactory(slug="f", deleted_at=timezone.now(), status="RUNNING")
    _store_observation(
        {"applications": {"e": ray_app("DELETING"), "f": ray_app("DELETING")}}, invalid={}, rejected=""
    )
    stopped.refresh_from_db()
    deleted.refresh_from_db()
    assert (stopped.status, deleted.status) == ("DELETING", "DELETING")
    _store_observation({"applications": {}}, invalid={}, rejected="")
    stopped.refresh_from_db()
    deleted.refresh_from_db()
    assert (stopped.status, deleted.status) == ("STOPPED", "DELETED")


def test_a_reused_slug_belongs_to_the_new_deployment():
    old = DeploymentFactory(slug="g", deleted_at=timezone.now(), status="DELETING")
    new = DeploymentFactory(slug="g")
    _store_observation({"applications": {"g": ray_app("RUNNING")}}, invalid={}, rejected="")
    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.status, new.status) == ("DELETED", "RUNNING")


def test_a_replica_count_change_republishes_routes_when_the_admission_limit_is_per_replica(monkeypatch):
    """The measured admission limit is per replica (ADR 0035): when Ray reports another count of
    running replicas, the gateways are told the new limit; a limit set by an operator does not move."""
    from deployments import reconciler

    published: list[str] = []
    monkeypatch.setattr(reconciler, "_publish_routes", lambda *a, **k: published.append("routes"))
    measured = DeploymentFactory(slug="a", status="RUNNING", running_replicas=1, capacity_inflight=6)
    fixed = DeploymentFactory(
        slug="b", status="RUNNING", running_replicas=1, capacity_inflight=6, max_inflight=4
    )
    apps = {"a": ray_app("RUNNING"), "b": ray_app("RUNNING")}
    _store_observation({"applications": apps}, invalid={}, rejected="")
    assert published == []
    apps["b"] = ray_app("RUNNING", replicas=("RUNNING", "RUNNING"))
    _store_observation({"applications": apps}, invalid={}, rejected="")
    assert published == []  # the operator's limit does not depend on replicas
    apps["a"] = ray_app("RUNNING", replicas=("RUNNING", "RUNNING"))
    _store_observation({"applications": apps}, invalid={}, rejected="")
    measured.refresh_from_db()
    fixed.refresh_from_db()
    assert published == ["routes"] and measured.admission_limit == 12 and fixed.admission_limit == 4


def test_replicas_added_and_lost_while_running_are_recorded_and_counted_in_gpu_hours():
    """An autoscaler adding a replica (or Ray losing one) while the status stays RUNNING: a
    ``replicas`` event, and GPU-hours count the GPUs held on each side of it."""
    import datetime as dt

    from deployments.models import DeploymentEvent
    from deployments.selectors.gpu_hours import deployment_gpu_spans

    d = DeploymentFactory(slug="a")
    _store_observation({"applications": {"a": ray_app("RUNNING")}}, invalid={}, rejected="")
    _store_observation({"applications": {"a": ray_app("RUNNING", replicas=("RUNNING",) * 3)}}, invalid={},
                       rejected="")  # fmt: skip
    _store_observation({"applications": {"a": ray_app("RUNNING", replicas=("RUNNING", "RUNNING"))}}, invalid={},
                       rejected="")  # fmt: skip
    moves = [(e.before["running_replicas"], e.after["running_replicas"]) for e in
             DeploymentEvent.objects.filter(deployment=d, kind="replicas").order_by("id")]  # fmt: skip
    assert moves == [(1, 3), (3, 2)] and d.events.filter(kind="status").count() == 1
    _, spans = deployment_gpu_spans(until=timezone.now() + dt.timedelta(hours=1))
    per_replica = d.gpus_per_replica
    assert [s.gpus for s in spans if s.deployment_id == d.pk] == [
        per_replica,
        3 * per_replica,
        2 * per_replica,
    ]
