"""A deployment's admission limit (gateway.admission, docs/decisions/0035): the concurrency at which
its SLA held in its latest measured capacity benchmark, unless an operator set one; the gateways
are told it in the routing table, and every change is audited."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from audit.selectors import events_for_object
from deployments.selectors import routing_table
from deployments.services import deployment_admission_set, deployment_capacity_record
from evaluations.services.benchmarks import capacity_inflight
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

pytestmark = pytest.mark.django_db


def _results(offered: dict, *, rps=None, e2e_mean=None, capacity_stage=2) -> dict:
    stages = [
        {
            "stage": 1,
            "offered": {"kind": "rate", "rate": 1.0},
            "request_throughput": 1.0,
            "e2e_ms": {"mean": 900.0},
        },
        {"stage": 2, "offered": offered, "request_throughput": rps, "e2e_ms": {"mean": e2e_mean}},
    ]
    return {"capacity": {"stage": capacity_stage}, "stages": stages}


def test_the_limit_is_the_capacity_stages_concurrency_or_littles_law_on_it():
    assert capacity_inflight(_results({"kind": "concurrency", "concurrency": 24})) == 24
    # 7.5 req/s completed × 1.2 s mean end-to-end = 9 in flight on average.
    assert capacity_inflight(_results({"kind": "rate", "rate": 8.0}, rps=7.5, e2e_mean=1200.0)) == 9
    assert (
        capacity_inflight(_results({"kind": "rate", "rate": 8.0}, rps=7.4, e2e_mean=1200.0)) == 9
    )  # 8.88 up
    assert capacity_inflight({"capacity": {"stage": None}, "stages": []}) is None
    assert capacity_inflight(_results({"kind": "rate", "rate": 8.0}, rps=0.0, e2e_mean=1200.0)) is None


def test_measured_capacity_sets_the_limit_an_operator_overrides_and_the_gateway_is_told(admin_user):
    d = DeploymentFactory(status="RUNNING")
    RouteTargetFactory(deployment=d, route__public_name="m-1")
    assert routing_table()["m-1"]["targets"][0]["max_inflight"] is None
    deployment_capacity_record(deployment_id=d.pk, inflight=12, run_id=41)
    assert routing_table()["m-1"]["targets"][0]["max_inflight"] == 12
    deployment_admission_set(deployment=d, max_inflight=5, actor=admin_user, reason="protect the pool")
    deployment_capacity_record(deployment_id=d.pk, inflight=20, run_id=42)
    assert routing_table()["m-1"]["targets"][0]["max_inflight"] == 5  # the operator's wins
    deployment_admission_set(deployment=d, max_inflight=None, actor=admin_user)
    assert routing_table()["m-1"]["targets"][0]["max_inflight"] == 20
    actions = [e.action for e in events_for_object(object_type="deployments.deployment", object_id=d.pk)]
    assert actions.count("deployment.admission") == 4


def test_the_measured_limit_is_per_replica_and_follows_the_replicas_running():
    d = DeploymentFactory(status="RUNNING", running_replicas=2)
    RouteTargetFactory(deployment=d, route__public_name="m-2")
    deployment_capacity_record(deployment_id=d.pk, inflight=13, run_id=7)  # 13 on 2 replicas: 7 each
    d.refresh_from_db()
    assert d.capacity_inflight == 7 and routing_table()["m-2"]["targets"][0]["max_inflight"] == 14
    for running, limit in ((4, 28), (1, 7), (0, 7)):  # scaled up; a replica lost; none reported yet
        d.running_replicas = running
        d.save(update_fields=["running_replicas"])
        assert routing_table()["m-2"]["targets"][0]["max_inflight"] == limit


@pytest.mark.parametrize("bad", [0, 100_001])
def test_a_limit_out_of_range_is_refused_and_nothing_changes(admin_user, bad):
    d = DeploymentFactory(status="RUNNING")
    with pytest.raises(ValidationError) as exc:
        deployment_admission_set(deployment=d, max_inflight=bad, actor=admin_user)
    assert "max_inflight" in exc.value.message_dict
    d.refresh_from_db()
    assert d.max_inflight is None


@pytest.mark.parametrize(
    "role,status",
    [("admin", 200), ("auditor", 403), ("member", 403), ("tenant_admin", 403), ("outsider", 403)],
)
def test_only_platform_admins_set_the_limit_through_the_api(role, status, role_clients, tenant_admin_client):
    d = DeploymentFactory(status="RUNNING")
    client = tenant_admin_client if role == "tenant_admin" else role_clients[role]
    url = f"/api/deployments/deployments/{d.pk}/admission/"
    r = client.post(url, {"max_inflight": 8, "reason": "pool of 2 replicas"}, content_type="application/json")
    assert r.status_code == status
    d.refresh_from_db()
    assert d.max_inflight == (8 if status == 200 else None)
    if status == 200:
        assert r.json()["max_inflight"] == 8
        bad = client.post(url, {"max_inflight": -3}, content_type="application/json")
        assert bad.status_code == 400 and "max_inflight" in bad.json()
        assert (
            client.post(url, {"max_inflight": None}, content_type="application/json").json()["max_inflight"]
            is None
        )


def test_the_deployment_page_says_where_its_limit_comes_from(admin_client, admin_user):
    d = DeploymentFactory(status="RUNNING")
    page = admin_client.get(d.get_absolute_url()).content.decode()
    assert "No limit: no measured capacity benchmark yet" in page
    deployment_capacity_record(deployment_id=d.pk, inflight=12, run_id=41)
    page = admin_client.get(d.get_absolute_url()).content.decode()
    assert "<strong>12</strong> requests in flight: 12 per replica" in page and "benchmark #41" in page
    deployment_admission_set(deployment=d, max_inflight=5, actor=admin_user)
    page = admin_client.get(d.get_absolute_url()).content.decode()
    assert (
        "<strong>5</strong> requests in flight, set by an operator (measured capacity: 12 per replica)"
        in page
    )


def test_an_autoscaled_deployment_can_aim_at_its_measured_capacity(admin_user):
    """Ray Serve's target per replica: the operator's, or (0) 80 % of the measured capacity per
    replica, so Ray adds a replica before the gateways start queueing; 32 before a benchmark."""
    from deployments.compiler import autoscaling_config
    from deployments.services import deployment_scale

    d = DeploymentFactory(status="RUNNING", running_replicas=1)
    d = deployment_scale(deployment=d, actor=admin_user, scaling_mode="autoscaling", min_replicas=1,
                         max_replicas=4, target_ongoing_requests=0)  # fmt: skip
    assert autoscaling_config(d)["target_ongoing_requests"] == 32
    assert d.replicas_summary() == "1–4 (target 32 ongoing from measured capacity)"
    deployment_capacity_record(deployment_id=d.pk, inflight=10, run_id=3)
    d.refresh_from_db()
    assert autoscaling_config(d) == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 8,
        "upscale_delay_s": 30.0,
        "downscale_delay_s": 600.0,
        "look_back_period_s": 30.0,
    }
    d = deployment_scale(
        deployment=d, actor=admin_user, scaling_mode="autoscaling", target_ongoing_requests=5
    )
    assert autoscaling_config(d)["target_ongoing_requests"] == 5
