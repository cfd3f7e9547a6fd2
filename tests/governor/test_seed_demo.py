"""seed_demo creates only what is missing, never changes what exists, never recreates what an admin
deleted; --reset restores the demo. Its writes go through the services as system:seed."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from billing.models import Membership, Tenant
from catalog.models import GpuType, ModelVersion
from deployments.models import Deployment
from deployments.services import deployment_delete
from governor.demo import SEED_ACTOR, seed_demo

pytestmark = pytest.mark.django_db


def _version(model: str, label: str) -> ModelVersion:
    return ModelVersion.objects.get(model__name=model, label=label)


def test_a_second_seed_changes_nothing_an_admin_edited(admin_user):
    seed_demo()
    fp8 = _version("Llama-3.1-8B-Instruct", "fp8")
    assert fp8.lifecycle == "candidate"
    ModelVersion.objects.filter(pk=fp8.pk).update(lifecycle="approved")  # as if promoted
    GpuType.objects.filter(name="H100 SXM").update(rental_usd_per_hour=Decimal("1.99"))
    Tenant.objects.filter(slug="acme").update(name="Acme Search EU")
    Membership.objects.filter(user__username="bob").update(role="admin")

    seed_demo()  # what `run` does at every start

    assert _version("Llama-3.1-8B-Instruct", "fp8").lifecycle == "approved"
    assert GpuType.objects.get(name="H100 SXM").rental_usd_per_hour == Decimal("1.99")
    assert Tenant.objects.get(slug="acme").name == "Acme Search EU"
    assert Membership.objects.get(user__username="bob").role == "admin"


def test_a_deleted_demo_deployment_is_not_recreated_until_reset(admin_user):
    seed_demo()
    llama = Deployment.objects.live().get(slug="llama-3-1-8b-h100")
    deployment_delete(deployment=llama, actor=admin_user)
    seed_demo()
    assert not Deployment.objects.live().filter(slug="llama-3-1-8b-h100").exists()

    call_command("seed_demo", "--reset", stdout=StringIO())
    assert Deployment.objects.live().filter(slug="llama-3-1-8b-h100").count() == 1


def test_deleted_gpu_type_and_user_stay_deleted(db):
    seed_demo()
    GpuType.objects.filter(name="A100 80GB").delete()
    get_user_model().objects.filter(username="carol").delete()
    seed_demo()
    assert not GpuType.objects.filter(name="A100 80GB").exists()
    assert not get_user_model().objects.filter(username="carol").exists()
    seed_demo(reset=True)
    assert GpuType.objects.filter(name="A100 80GB").exists()
    assert Membership.objects.get(user__username="carol").tenant.slug == "globex"


def test_reset_restores_edited_values_and_passwords(db):
    seed_demo()
    GpuType.objects.filter(name="H100 SXM").update(rental_usd_per_hour=Decimal("1.99"))
    Tenant.objects.filter(slug="acme").update(name="Renamed", is_active=False)
    alice = get_user_model().objects.get(username="alice")
    alice.set_password("changed-by-alice")
    alice.save()
    out = StringIO()
    call_command("seed_demo", "--reset", stdout=out)
    assert "restored" in out.getvalue()
    assert GpuType.objects.get(name="H100 SXM").rental_usd_per_hour == Decimal("2.49")
    acme = Tenant.objects.get(slug="acme")
    assert acme.name == "Acme Search" and acme.is_active
    alice.refresh_from_db()
    assert alice.check_password("governor-alice")


def test_reset_moves_a_version_back_only_where_the_lifecycle_allows(db):
    seed_demo()
    fp8 = _version("Llama-3.1-8B-Instruct", "fp8")  # candidate in the demo
    ModelVersion.objects.filter(pk=fp8.pk).update(lifecycle="draft")
    awq = _version("Llama-3.1-70B-Instruct", "awq-int4")  # draft in the demo
    ModelVersion.objects.filter(pk=awq.pk).update(lifecycle="rejected")
    seed_demo(reset=True)
    assert _version("Llama-3.1-8B-Instruct", "fp8").lifecycle == "candidate"  # draft → candidate exists
    assert _version("Llama-3.1-70B-Instruct", "awq-int4").lifecycle == "rejected"  # no way back


def test_objects_that_existed_before_the_seed_are_adopted_not_overwritten(db):
    from tests.factories import GpuTypeFactory

    GpuTypeFactory(name="L40S", rental_usd_per_hour=Decimal("0.50"))
    seed_demo()
    assert GpuType.objects.get(name="L40S").rental_usd_per_hour == Decimal("0.50")


def test_seed_writes_through_the_services_as_the_seed_actor(db):
    from audit.models import AuditEvent

    seed_demo()
    tenant_events = AuditEvent.objects.filter(action="tenant.create")
    assert sorted(tenant_events.values_list("object_repr", flat=True)) == ["Acme Search", "Globex Support"]
    assert set(AuditEvent.objects.values_list("actor", flat=True)) == {SEED_ACTOR}
    assert AuditEvent.objects.filter(action="membership.create").count() == 3
    seed_demo()
    assert AuditEvent.objects.filter(action="tenant.create").count() == 2  # nothing written again


def test_governor_demo_needs_no_import_linter_exception():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert "governor.demo ->" not in text
