"""REST API: every role on every endpoint, create with preflight, actions, routing table."""

from __future__ import annotations

import json

import pytest

from deployments.models import Deployment, ModelRoute, RouteTarget
from deployments.selectors import routing_table
from tests.deployments.factories import (
    DeploymentFactory,
    RouteTargetFactory,
    llama_8b_version,
    llama_70b_version,
)
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db
API = "/api/deployments"
ROLES_READ = [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 401)]
NON_ADMINS = ["auditor", "member", "outsider", "anon"]


@pytest.fixture
def target(db):
    return RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING"), route__public_name="llama-3.1-8b"
    )


def _read_urls(target):
    d = target.deployment.pk
    return [
        f"{API}/deployments/",
        f"{API}/deployments/{d}/",
        f"{API}/deployments/{d}/events/",
        f"{API}/routes/",
        f"{API}/routes/{target.route.pk}/",
        f"{API}/route-targets/",
        f"{API}/route-targets/{target.pk}/",
        f"{API}/reconcile-runs/",
        f"{API}/routing-table/",
        f"{API}/serve-config/",
    ]


@pytest.mark.parametrize("role,expected", ROLES_READ)
def test_reads_for_admins_and_auditors_only(role_clients, target, role, expected):
    for url in _read_urls(target):
        assert role_clients[role].get(url).status_code == expected, url


def _create_body(**overrides):
    body = {
        "name": "api dep",
        "slug": "api-dep",
        "model_version": llama_8b_version().pk,
        "engine_kind": "simulated",
        "gpu_type": GpuTypeFactory().pk,
        "max_model_len": 8192,
        "max_num_seqs": 32,
    }
    body.update(overrides)
    return body


@pytest.mark.parametrize("role", NON_ADMINS)
def test_non_admins_cannot_write_anything(role_clients, target, role):
    c = role_clients[role]
    d = target.deployment
    writes = [
        ("post", f"{API}/deployments/", _create_body()),
        ("post", f"{API}/deployments/{d.pk}/scale/", {"num_replicas": 3}),
        ("post", f"{API}/deployments/{d.pk}/stop/", {}),
        ("post", f"{API}/deployments/{d.pk}/start/", {}),
        ("delete", f"{API}/deployments/{d.pk}/", None),
        ("post", f"{API}/routes/", {"public_name": "x"}),
        ("patch", f"{API}/routes/{target.route.pk}/", {"description": "x"}),
        ("delete", f"{API}/routes/{target.route.pk}/", None),
        ("post", f"{API}/route-targets/", {"route": target.route.pk, "deployment": d.pk, "weight": 1}),
        ("patch", f"{API}/route-targets/{target.pk}/", {"weight": 1}),
        ("delete", f"{API}/route-targets/{target.pk}/", None),
        ("post", f"{API}/reconcile/", {}),
    ]
    for method, url, body in writes:
        kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
        expected = 401 if role == "anon" else 403  # anonymous API calls are challenged
        assert getattr(c, method)(url, **kwargs).status_code == expected, (method, url)
    d.refresh_from_db()
    assert (d.num_replicas, d.desired_state, d.deleted_at) == (1, "running", None)
    assert RouteTarget.objects.get(pk=target.pk).weight == 100
    assert ModelRoute.objects.count() == 1


def _post(client, url, body=None):
    return client.post(url, data=json.dumps(body or {}), content_type="application/json")


def test_admin_creates_scales_stops_starts_and_deletes(admin_client):
    r = _post(admin_client, f"{API}/deployments/", _create_body())
    assert r.status_code == 201, r.content
    data = r.json()
    assert data["status"] == "PENDING"
    assert data["openai_base_url"].endswith("/d/api-dep/v1")
    assert data["served_model_name"] == "Llama-3.1-8B-Instruct"
    pk = data["id"]
    r = _post(
        admin_client,
        f"{API}/deployments/{pk}/scale/",
        {"scaling_mode": "autoscaling", "min_replicas": 1, "max_replicas": 3},
    )
    assert r.status_code == 200 and r.json()["scaling_mode"] == "autoscaling"
    assert _post(admin_client, f"{API}/deployments/{pk}/stop/").json()["desired_state"] == "stopped"
    assert _post(admin_client, f"{API}/deployments/{pk}/start/").json()["desired_state"] == "running"
    assert admin_client.delete(f"{API}/deployments/{pk}/").status_code == 204
    assert admin_client.get(f"{API}/deployments/{pk}/").status_code == 404
    kinds = [e["kind"] for e in Deployment.objects.get(pk=pk).events.order_by("id").values("kind")]
    assert kinds == ["created", "scaled", "stopped", "started", "deleted"]


def test_api_create_refuses_what_does_not_fit_with_the_numbers(admin_client):
    r = _post(admin_client, f"{API}/deployments/", _create_body(model_version=llama_70b_version().pk))
    assert r.status_code == 400
    assert "72.0 GiB usable" in r.json()["non_field_errors"][0]


def test_api_create_returns_preflight_warnings(admin_client):
    r = _post(admin_client, f"{API}/deployments/", _create_body(max_model_len=131072, max_num_seqs=256))
    assert r.status_code == 201
    assert "fewer than max_num_seqs 256" in r.json()["preflight_warnings"][0]


def test_observed_fields_are_read_only(admin_client):
    r = _post(admin_client, f"{API}/deployments/", _create_body(status="RUNNING", running_replicas=9))
    assert r.status_code == 201
    assert r.json()["status"] == "PENDING" and r.json()["running_replicas"] == 0


def test_scale_rejects_bad_bounds(admin_client, target):
    url = f"{API}/deployments/{target.deployment.pk}/scale/"
    r = _post(admin_client, url, {"scaling_mode": "autoscaling", "min_replicas": 4, "max_replicas": 2})
    assert r.status_code == 400


def test_routes_and_targets_through_the_api(admin_client, target):
    r = _post(
        admin_client, f"{API}/routes/", {"public_name": "mistral-7b", "long_context_threshold_tokens": 32000}
    )
    assert r.status_code == 201
    route_id = r.json()["id"]
    r = _post(
        admin_client,
        f"{API}/route-targets/",
        {"route": route_id, "deployment": target.deployment.pk, "weight": 10},
    )
    assert r.status_code == 201, r.content
    # Posting the same pair again changes the weight instead of failing.
    r = _post(
        admin_client,
        f"{API}/route-targets/",
        {"route": route_id, "deployment": target.deployment.pk, "weight": 0},
    )
    assert r.status_code == 201 and RouteTarget.objects.get(route_id=route_id).weight == 0
    assert (
        _post(
            admin_client,
            f"{API}/route-targets/",
            {"route": route_id, "deployment": target.deployment.pk, "weight": -1},
        ).status_code
        == 400
    )
    table = admin_client.get(f"{API}/routing-table/").json()
    assert table["mistral-7b"]["long_context_threshold"] == 32000


def test_routing_table_shape_for_the_gateway(settings, target):
    settings.RAY_SERVE_URL = "http://ray-head:8100"
    d = target.deployment
    DeploymentFactory(slug="deleted", deleted_at="2026-01-01T00:00:00Z")
    assert routing_table() == {
        "llama-3.1-8b": {
            "long_context_threshold": None,
            "tenant_ids": None,
            "free": False,
            "voting": "off",
            "cache": None,  # the semantic cache is off unless an admin turns it on
            "targets": [
                {
                    "deployment_id": d.pk,
                    "deployment_slug": d.slug,
                    "version_id": d.model_version_id,
                    "base_url": f"http://ray-head:8100/d/{d.slug}/v1",
                    "engine_model": "llama-3.1-8b",
                    "weight": 100,
                    "pool": "online",
                    "status": "RUNNING",
                    "tokens_per_image": None,
                    "task": "generate",
                    "max_model_len": d.max_model_len,
                    "max_inflight": None,
                }
            ],
        }
    }


def test_openapi_schema_documents_the_deployment_endpoints(admin_client):
    schema = admin_client.get("/api/schema/?format=json").json()
    assert "/api/deployments/deployments/{id}/scale/" in schema["paths"]
    assert "/api/deployments/routing-table/" in schema["paths"]
