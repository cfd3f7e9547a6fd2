"""Console pages: every role on every view, the create form's preflight, actions and their events."""

from __future__ import annotations

import pytest
from django.urls import reverse

from deployments.models import Deployment, DeploymentEvent, ModelRoute, RouteTarget
from tests.deployments.factories import (
    DeploymentFactory,
    RouteTargetFactory,
    llama_8b_version,
    llama_70b_version,
)
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db

READ_PAGES = [
    ("deployments:list", False),
    ("deployments:detail", True),
    ("deployments:serve_config", False),
    ("deployments:route_list", False),
    ("deployments:route_detail", "route"),
]
ADMIN_PAGES = [
    ("deployments:create", False),
    ("deployments:route_create", False),
    ("deployments:route_edit", "route"),
]
ACTIONS = ["scale", "stop", "start", "delete"]


@pytest.fixture
def target(db):
    return RouteTargetFactory(deployment=DeploymentFactory(status="RUNNING"))


def _url(name, arg, target):
    if arg is True:
        return reverse(name, args=[target.deployment.pk])
    if arg == "route":
        return reverse(name, args=[target.route.pk])
    return reverse(name)


@pytest.mark.parametrize("name,arg", READ_PAGES)
@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_read_pages_for_admins_and_auditors_only(role_clients, target, name, arg, role, expected):
    response = role_clients[role].get(_url(name, arg, target))
    assert response.status_code == expected
    if expected == 302:
        assert "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("name,arg", ADMIN_PAGES)
@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_admin_forms_for_admins_only(role_clients, target, name, arg, role, expected):
    assert role_clients[role].get(_url(name, arg, target)).status_code == expected


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_non_admins_cannot_act_on_deployments(role_clients, target, action, role):
    d = target.deployment
    response = role_clients[role].post(reverse(f"deployments:{action}", args=[d.pk]), {"num_replicas": 3})
    assert response.status_code == (302 if role == "anon" else 403)
    d.refresh_from_db()
    assert (d.num_replicas, d.desired_state, d.deleted_at) == (1, "running", None)


@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_non_admins_cannot_change_routes_or_reconcile(role_clients, target, role):
    client = role_clients[role]
    route = target.route
    expected = 302 if role == "anon" else 403
    assert client.post(reverse("deployments:route_create"), {"public_name": "x"}).status_code == expected
    assert client.post(reverse("deployments:route_delete", args=[route.pk])).status_code == expected
    assert (
        client.post(
            reverse("deployments:route_target_set", args=[route.pk]),
            {"deployment": target.deployment.pk, "weight": 5},
        ).status_code
        == expected
    )
    assert (
        client.post(reverse("deployments:route_target_delete", args=[route.pk, target.pk])).status_code
        == expected
    )
    assert client.post(reverse("deployments:reconcile")).status_code == expected
    assert ModelRoute.objects.filter(pk=route.pk).exists()
    assert RouteTarget.objects.get(pk=target.pk).weight == 100


def test_list_shows_status_replicas_and_polls(admin_client, target):
    response = admin_client.get(reverse("deployments:list"))
    html = response.content.decode()
    assert target.deployment.slug in html
    assert 'hx-trigger="every 2s"' in html
    assert 'data-status="RUNNING"' in html


def test_list_query_count_is_flat(admin_client, django_assert_max_num_queries):
    for _ in range(10):
        DeploymentFactory()
    with django_assert_max_num_queries(10):
        admin_client.get(reverse("deployments:list"))


def test_unknown_status_reads_cluster_unreachable(admin_client):
    DeploymentFactory(status="UNKNOWN", status_message="Cluster unreachable: ConnectError")
    html = admin_client.get(reverse("deployments:list")).content.decode()
    assert "unknown / cluster unreachable" in html


def test_detail_shows_base_url_ray_error_replicas_and_events(admin_client, settings):
    settings.RAY_SERVE_URL = "http://127.0.0.1:8100"
    d = DeploymentFactory(
        slug="broken",
        status="DEPLOY_FAILED",
        status_message="Deploying app 'broken' failed with exception: ModuleNotFoundError: No module named 'nope'",
        last_error="ModuleNotFoundError: No module named 'nope'",
        ray_deployments=[
            {
                "name": "SimulatedVLLM",
                "status": "HEALTHY",
                "replicas": [{"replica_id": "abc123", "state": "RUNNING", "node_ip": "127.0.0.1", "pid": 42}],
            }
        ],
    )
    DeploymentEvent.objects.create(
        deployment=d, kind="status", before={"status": "DEPLOYING"}, after={"status": "DEPLOY_FAILED"}
    )
    html = admin_client.get(d.get_absolute_url()).content.decode()
    assert "http://127.0.0.1:8100/d/broken/v1" in html
    assert "No module named &#x27;nope&#x27;" in html
    assert "abc123" in html
    assert "DEPLOYING → <strong>DEPLOY_FAILED</strong>" in html
    partial = admin_client.get(d.get_absolute_url() + "?part=status", HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="deployment-status"')
    assert "abc123" in partial


def test_auditor_sees_no_action_buttons(auditor_client, target):
    html = auditor_client.get(target.deployment.get_absolute_url()).content.decode()
    assert 'id="scale-form"' not in html
    assert "/stop/" not in html


def _form_data(**overrides):
    data = {
        "name": "Llama 8B test",
        "slug": "llama-8b-test",
        "model_version": llama_8b_version().pk,
        "engine_kind": "simulated",
        "gpu_type": GpuTypeFactory().pk,
        "tensor_parallel_size": 1,
        "pool": "online",
        "served_model_name": "",
        "scaling_mode": "fixed",
        "num_replicas": 1,
        "min_replicas": 1,
        "max_replicas": 2,
        "target_ongoing_requests": 32,
        "max_model_len": 8192,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": "on",
        "quantization": "",
        "kv_cache_dtype": "auto",
        "extra_engine_args": "{}",
        "import_path_override": "",
        "time_scale": 1.0,
    }
    data.update(overrides)
    return data


def test_admin_creates_a_deployment_with_an_event(admin_client, admin_user):
    response = admin_client.post(reverse("deployments:create"), _form_data())
    d = Deployment.objects.get(slug="llama-8b-test")
    assert response.status_code == 302 and response["Location"] == d.get_absolute_url()
    assert d.served_model_name == "Llama-3.1-8B-Instruct"
    assert d.status == "PENDING" and d.desired_state == "running"
    (event,) = d.events.all()
    assert event.kind == "created" and event.actor == admin_user


def test_create_form_refuses_what_does_not_fit_and_shows_the_numbers(admin_client):
    data = _form_data(model_version=llama_70b_version().pk)
    response = admin_client.post(reverse("deployments:create"), data)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Does not fit" in html and "131.4 GiB" in html and "72.0 GiB usable" in html
    assert not Deployment.objects.exists()


def test_create_warns_when_kv_cache_is_short(admin_client):
    response = admin_client.post(
        reverse("deployments:create"), _form_data(max_model_len=131072, max_num_seqs=256), follow=True
    )
    assert "fewer than max_num_seqs 256" in response.content.decode()
    assert Deployment.objects.filter(slug="llama-8b-test").exists()


def test_create_refuses_a_live_duplicate_slug(admin_client):
    DeploymentFactory(slug="llama-8b-test")
    response = admin_client.post(reverse("deployments:create"), _form_data())
    assert response.status_code == 200
    assert Deployment.objects.filter(slug="llama-8b-test").count() == 1


def test_admin_scales_stops_starts_and_deletes_with_events(admin_client, target):
    d = target.deployment
    admin_client.post(reverse("deployments:scale", args=[d.pk]), {"scaling_mode": "fixed", "num_replicas": 2})
    d.refresh_from_db()
    assert d.num_replicas == 2
    admin_client.post(reverse("deployments:stop", args=[d.pk]))
    d.refresh_from_db()
    assert d.desired_state == "stopped"
    admin_client.post(reverse("deployments:start", args=[d.pk]))
    d.refresh_from_db()
    assert d.desired_state == "running"
    response = admin_client.post(reverse("deployments:delete", args=[d.pk]))
    assert response["Location"] == reverse("deployments:list")
    d.refresh_from_db()
    assert d.deleted_at is not None
    assert not RouteTarget.objects.filter(deployment=d).exists()
    assert list(d.events.order_by("id").values_list("kind", flat=True)) == [
        "scaled",
        "stopped",
        "started",
        "deleted",
    ]
    assert d.slug not in admin_client.get(reverse("deployments:list")).content.decode()


def test_events_are_append_only(target):
    event = DeploymentEvent.objects.create(deployment=target.deployment, kind="created")
    event.message = "rewritten"
    with pytest.raises(ValueError):
        event.save()
    with pytest.raises(ValueError):
        event.delete()


def test_admin_edits_routes_and_targets(admin_client, target):
    response = admin_client.post(
        reverse("deployments:route_create"),
        {"public_name": "llama-fast", "long_context_threshold_tokens": 16000},
    )
    route = ModelRoute.objects.get(public_name="llama-fast")
    assert response["Location"] == route.get_absolute_url()
    admin_client.post(
        reverse("deployments:route_target_set", args=[route.pk]),
        {"deployment": target.deployment.pk, "weight": 30},
    )
    assert route.targets.get().weight == 30
    html = admin_client.get(route.get_absolute_url()).content.decode()
    assert "100.0 %" in html
    admin_client.post(reverse("deployments:route_target_delete", args=[route.pk, route.targets.get().pk]))
    assert not route.targets.exists()
