"""One write path: every governed write, through the console, the API or Django admin, goes through
a service and leaves exactly one audit event naming the person who made it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from billing.models import ApiKey, Budget, Membership, Price, Tenant, TenantLimits
from catalog.models import GpuType, Model, ModelVersion
from deployments.models import Deployment, RouteTarget
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory
from tests.factories import TINY_MODEL_FIELDS, GpuTypeFactory, ModelVersionFactory, UserFactory

pytestmark = pytest.mark.django_db

GPU = {
    "name": "Test GPU",
    "memory_gib": 80,
    "hbm_bandwidth_gbps": 3350,
    "bf16_tflops": 989,
    "fp8_tflops": 1979,
    "interconnect": "nvlink",
    "rental_usd_per_hour": "2.50",
}


class Trail:
    """The audit events recorded since the test started."""

    def __init__(self) -> None:
        self.start = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0

    def new(self):
        return list(AuditEvent.objects.filter(seq__gt=self.start).order_by("seq"))

    def one(self, action: str, actor: str) -> AuditEvent:
        events = self.new()
        assert [(e.action, e.actor) for e in events] == [(action, actor)], events
        self.start = events[-1].seq
        return events[0]


@pytest.fixture
def trail():
    return Trail()


def test_gpu_type_create_and_edit_through_the_console(admin_client, admin_user, trail):
    response = admin_client.post(reverse("catalog:gpu_create"), GPU)
    assert response.status_code == 302, response.content.decode()[:500]
    gpu = GpuType.objects.get(name="Test GPU")
    event = trail.one("gputype.create", "admin")
    assert event.object_id == str(gpu.pk) and event.after["rental_usd_per_hour"] == "2.500"
    assert event.role == "platform_admin" and event.request_id
    admin_client.post(reverse("catalog:gpu_edit", args=[gpu.pk]), {**GPU, "rental_usd_per_hour": "3.10"})
    event = trail.one("gputype.update", "admin")
    assert event.before == {"rental_usd_per_hour": "2.500"} and event.after == {
        "rental_usd_per_hour": "3.100"
    }


def test_gpu_type_create_update_delete_through_the_api(admin_client, trail):
    response = admin_client.post("/api/catalog/gpu-types/", GPU, content_type="application/json")
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    trail.one("gputype.create", "admin")
    response = admin_client.patch(
        f"/api/catalog/gpu-types/{pk}/", {"rental_usd_per_hour": "1.750"}, content_type="application/json"
    )
    assert response.status_code == 200
    assert trail.one("gputype.update", "admin").after == {"rental_usd_per_hour": "1.750"}
    assert admin_client.delete(f"/api/catalog/gpu-types/{pk}/").status_code == 204
    assert trail.one("gputype.delete", "admin").before["name"] == "Test GPU"
    assert not GpuType.objects.filter(pk=pk).exists()


def test_model_create_through_the_api_and_a_bad_body_changes_nothing(admin_client, trail):
    body = {**TINY_MODEL_FIELDS, "licence": ""}
    assert admin_client.post("/api/catalog/models/", body, content_type="application/json").status_code == 201
    trail.one("model.create", "admin")
    bad = admin_client.post(
        "/api/catalog/models/", {**body, "name": "Other", "kv_heads": 3}, content_type="application/json"
    )
    assert bad.status_code == 400 and "kv_heads" in bad.json()
    assert trail.new() == [] and not Model.objects.filter(name="Other").exists()


def test_version_transition_through_console_and_api_records_actor_and_states(admin_client, trail):
    version = ModelVersionFactory(lifecycle="draft")
    admin_client.post(reverse("catalog:version_transition", args=[version.pk]), {"to": "candidate"})
    event = trail.one("model_version.transition", "admin")
    assert (event.before, event.after) == ({"lifecycle": "draft"}, {"lifecycle": "candidate"})
    response = admin_client.post(
        f"/api/catalog/versions/{version.pk}/transition/", {"to": "rejected"}, content_type="application/json"
    )
    assert response.status_code == 200
    assert trail.one("model_version.transition", "admin").after == {"lifecycle": "rejected"}
    refused = admin_client.post(
        f"/api/catalog/versions/{version.pk}/transition/", {"to": "draft"}, content_type="application/json"
    )
    assert refused.status_code == 400 and "Lifecycle." not in refused.content.decode()
    assert trail.new() == []


def test_version_edit_cannot_change_the_lifecycle_behind_the_transition(admin_client, trail):
    version = ModelVersionFactory(lifecycle="draft")
    response = admin_client.patch(
        f"/api/catalog/versions/{version.pk}/", {"lifecycle": "serving"}, content_type="application/json"
    )
    assert response.status_code in (200, 400)  # the lifecycle is read-only in the API
    version.refresh_from_db()
    assert version.lifecycle == "draft" and trail.new() == []


def test_deployment_actions_in_the_console_each_leave_one_event(admin_client, trail):
    deployment = RouteTargetFactory(deployment=DeploymentFactory(status="RUNNING")).deployment
    trail.start = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    admin_client.post(
        reverse("deployments:scale", args=[deployment.pk]), {"scaling_mode": "fixed", "num_replicas": 2}
    )
    event = trail.one("deployment.scaled", "admin")
    assert event.after["num_replicas"] == 2 and event.object_id == str(deployment.pk)
    admin_client.post(reverse("deployments:stop", args=[deployment.pk]))
    trail.one("deployment.stopped", "admin")


def test_route_target_weight_through_the_api(admin_client, trail):
    target = RouteTargetFactory(deployment=DeploymentFactory(status="RUNNING"), weight=100)
    trail.start = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    response = admin_client.patch(
        f"/api/deployments/route-targets/{target.pk}/", {"weight": 30}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    event = trail.one("routetarget.update", "admin")
    assert (event.before, event.after) == ({"weight": 100}, {"weight": 30})
    assert RouteTarget.objects.get(pk=target.pk).weight == 30


def test_tenant_and_membership_through_the_api(admin_client, trail):
    response = admin_client.post(
        "/api/billing/tenants/", {"name": "Initech", "slug": "initech"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    tenant = Tenant.objects.get(slug="initech")
    assert trail.one("tenant.create", "admin").tenant_id == tenant.pk
    user = UserFactory(username="peter")
    response = admin_client.post(
        "/api/billing/memberships/",
        {"user": user.pk, "tenant": tenant.pk, "role": "admin"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    event = trail.one("membership.create", "admin")
    assert event.tenant_id == tenant.pk and event.after["role"] == "admin"
    membership = Membership.objects.get(user=user, tenant=tenant)
    assert admin_client.delete(f"/api/billing/memberships/{membership.pk}/").status_code == 204
    trail.one("membership.delete", "admin")


def test_api_key_create_and_revoke_by_a_tenant_admin_in_the_console(tenant_admin_client, tenant, trail):
    response = tenant_admin_client.post(
        reverse("billing:key_create"), {"tenant": tenant.pk, "name": "web", "rpm_limit": 0, "tpm_limit": 0}
    )
    assert response.status_code in (200, 302)
    key = ApiKey.objects.get(name="web")
    event = trail.one("apikey.create", "tenantadmin")
    assert event.tenant_id == tenant.pk and "key_hash" not in event.after
    tenant_admin_client.post(reverse("billing:key_revoke", args=[key.pk]))
    trail.one("apikey.revoke", "tenantadmin")


def test_price_budget_and_limits_through_console_and_api(admin_client, tenant, trail):
    from tests.deployments.factories import ModelRouteFactory

    ModelRouteFactory(public_name="sim-llama")
    data = {"public_model": "sim-llama", "input_per_million": "0.5", "output_per_million": "1.5"}
    admin_client.post(reverse("billing:price_create"), data)
    assert trail.one("price.create", "admin").after["public_model"] == "sim-llama"
    response = admin_client.post(
        "/api/billing/prices/", {**data, "input_per_million": "0.6"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    trail.one("price.create", "admin")
    assert Price.objects.filter(public_model="sim-llama").count() == 2
    response = admin_client.put(
        f"/api/billing/budgets/{tenant.slug}/",
        {"amount_usd": "25", "period": "monthly", "soft_threshold_percents": [50], "hard_cap_percent": 100},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert trail.one("budget.create", "admin").tenant_id == tenant.pk
    assert Budget.objects.get(tenant=tenant).amount_usd == Decimal("25")
    response = admin_client.put(
        f"/api/billing/limits/{tenant.slug}/",
        {"rpm_limit": 60, "tpm_limit": 0, "max_input_tokens": 0, "max_output_tokens": 0},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    trail.one("tenantlimits.create", "admin")
    assert TenantLimits.objects.get(tenant=tenant).rpm_limit == 60
    assert admin_client.delete(f"/api/billing/budgets/{tenant.slug}/").status_code == 204
    trail.one("budget.delete", "admin")


GOVERNED_ADMIN = [
    ("catalog", "gputype", lambda: GpuTypeFactory()),
    ("catalog", "modelversion", lambda: ModelVersionFactory()),
    ("deployments", "deployment", lambda: DeploymentFactory()),
    ("deployments", "routetarget", lambda: RouteTargetFactory()),
    ("billing", "tenant", lambda: Tenant.objects.create(name="T", slug="t")),
    (
        "billing",
        "price",
        lambda: Price.objects.create(
            public_model="m", input_per_million=1, output_per_million=1, effective_from="2026-01-01T00:00Z"
        ),
    ),  # fmt: skip
]


@pytest.mark.parametrize("app,model,make", GOVERNED_ADMIN, ids=[f"{a}.{m}" for a, m, _ in GOVERNED_ADMIN])
def test_django_admin_is_read_only_for_governed_models(admin_client, app, model, make):
    obj = make()
    trail = Trail()
    assert admin_client.get(reverse(f"admin:{app}_{model}_changelist")).status_code == 200
    assert admin_client.get(reverse(f"admin:{app}_{model}_add")).status_code == 403
    assert admin_client.post(reverse(f"admin:{app}_{model}_add"), {}).status_code == 403
    assert (
        admin_client.post(reverse(f"admin:{app}_{model}_delete", args=[obj.pk]), {"post": "yes"}).status_code
        == 403
    )
    change = admin_client.post(reverse(f"admin:{app}_{model}_change", args=[obj.pk]), {})
    assert change.status_code in (200, 403)  # the view page renders read-only; nothing is saved
    assert type(obj).objects.filter(pk=obj.pk).exists()
    assert trail.new() == []


def test_an_auditor_cannot_write_anywhere(auditor_client, tenant):
    version = ModelVersionFactory(lifecycle="draft")
    assert (
        auditor_client.post("/api/catalog/gpu-types/", GPU, content_type="application/json").status_code
        == 403
    )
    assert (
        auditor_client.post(
            reverse("catalog:version_transition", args=[version.pk]), {"to": "candidate"}
        ).status_code
        == 403
    )
    assert auditor_client.post(reverse("billing:price_create"), {"public_model": "x"}).status_code == 403
    version.refresh_from_db()
    assert version.lifecycle == "draft"
    assert not GpuType.objects.filter(name="Test GPU").exists() and not Price.objects.exists()
    assert Deployment.objects.count() == 0 and ModelVersion.objects.count() == 1


def test_a_refused_write_is_recorded_with_who_tried(member_client, tenant, auditor_client, trail):
    response = member_client.post(
        reverse("billing:key_create"), {"tenant": tenant.pk, "name": "x", "rpm_limit": 0, "tpm_limit": 0}
    )
    assert response.status_code == 403 and not ApiKey.objects.exists()
    event = trail.one("write.refused", "member")
    assert event.object_repr == f"POST {reverse('billing:key_create')}"
    response = auditor_client.post("/api/catalog/gpu-types/", GPU, content_type="application/json")
    assert response.status_code == 403
    assert trail.one("write.refused", "auditor").role == "auditor"
