"""GPU hourly cost versions: the formula, effective dating, pools, validation, audit and the page."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from catalog.selectors import gpu_cost_in_force, gpu_cost_versions
from catalog.services import gpu_cost_compute, gpu_cost_version_create
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db
D = Decimal


def test_tco_formula_terms():
    usd, formula, terms = gpu_cost_compute(
        basis="tco", target_utilization=D("0.5"), purchase_price_usd=D("30000"), depreciation_years=D("4"),
        power_kw=D("0.7"), pue=D("1.3"), electricity_usd_per_kwh=D("0.10"),
        datacenter_usd_per_month=D("100"), operations_usd_per_month=D("46.1"),
    )  # fmt: skip
    depreciation = D("30000") / (D("4") * D("8766"))  # 0.8556
    power = D("0.7") * D("1.3") * D("0.10")  # 0.091
    ops = D("146.1") / (D("8766") / 12)  # 0.2
    assert usd == ((depreciation + power + ops) / D("0.5")).quantize(D("0.0001"))
    assert terms["power"] == "0.0910" and terms["target_utilization"] == "0.5"
    assert "target utilization" in formula and "PUE" in formula


def test_rent_over_utilization():
    usd, formula, _ = gpu_cost_compute(basis="rent", target_utilization=D("0.8"), rent_usd_per_hour=D("2.00"))
    assert usd == D("2.5000") and formula.startswith("rent")


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"basis": "rent", "target_utilization": D("1"), "rent_usd_per_hour": D("0")}, "rent_usd_per_hour"),
        ({"basis": "rent", "target_utilization": D("1"), "rent_usd_per_hour": D("-1")}, "rent_usd_per_hour"),
        ({"basis": "rent", "target_utilization": D("0"), "rent_usd_per_hour": D("2")}, "target_utilization"),
        (
            {"basis": "rent", "target_utilization": D("1.2"), "rent_usd_per_hour": D("2")},
            "target_utilization",
        ),
        (
            {
                "basis": "tco",
                "target_utilization": D("1"),
                "purchase_price_usd": D("0"),
                "depreciation_years": D("4"),
                "power_kw": D("1"),
                "pue": D("1.2"),
                "electricity_usd_per_kwh": D("0.1"),
            },
            "purchase_price_usd",
        ),  # fmt: skip
        (
            {
                "basis": "tco",
                "target_utilization": D("1"),
                "purchase_price_usd": D("100"),
                "depreciation_years": D("4"),
                "power_kw": D("1"),
                "pue": D("0.9"),
                "electricity_usd_per_kwh": D("0.1"),
            },
            "pue",
        ),  # fmt: skip
    ],
)
def test_bad_inputs_name_the_field_and_save_nothing(kwargs, field, admin_user):
    gpu = GpuTypeFactory()
    with pytest.raises(ValidationError) as exc:
        gpu_cost_version_create(gpu_type=gpu, actor=admin_user, **kwargs)
    assert field in exc.value.message_dict
    assert not gpu_cost_versions(gpu_type_id=gpu.pk).exists()


def test_versions_are_effective_dated_per_pool_and_audited(admin_user):
    from audit.models import AuditEvent

    gpu = GpuTypeFactory()
    now = timezone.now()
    old = gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("2"), actor=admin_user,
                                  effective_from=now - dt.timedelta(days=10))  # fmt: skip
    new = gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("3"), actor=admin_user,
                                  effective_from=now - dt.timedelta(days=1))  # fmt: skip
    future = gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("9"), actor=admin_user,
                                     effective_from=now + dt.timedelta(days=1))  # fmt: skip
    pool = gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("1.5"), pool="batch",
                                   actor=admin_user, effective_from=now - dt.timedelta(days=5))  # fmt: skip
    assert gpu_cost_in_force(gpu_type_id=gpu.pk) == new
    assert gpu_cost_in_force(gpu_type_id=gpu.pk, at=now - dt.timedelta(days=5)) == old
    assert gpu_cost_in_force(gpu_type_id=gpu.pk, pool="batch") == pool
    assert gpu_cost_in_force(gpu_type_id=gpu.pk, pool="online") == new  # no own version: all-pools one
    assert gpu_cost_in_force(gpu_type_id=gpu.pk, at=now + dt.timedelta(days=2)) == future
    events = AuditEvent.objects.filter(action="gpu_cost.create").order_by("seq")
    assert events.count() == 4
    assert events.first().after["usd_per_gpu_hour"] == "2.0000"


@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200), ("anon", 302)]
)
def test_gpu_page_shows_versions_by_role(role_clients, role, status, admin_user):
    gpu = GpuTypeFactory()
    gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("2.4"), target_utilization=D("0.6"), actor=admin_user)  # fmt: skip
    r = role_clients[role].get(reverse("catalog:gpu_detail", args=[gpu.pk]))
    assert r.status_code == status
    if status == 200:
        html = r.content.decode()
        assert "$4.0000/GPU-hour" in html and "rent $/GPU-hour ÷ target utilization" in html
        assert ('id="cost-form"' in html) == (role == "admin")


@pytest.mark.parametrize("role,status", [("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)])
def test_only_admins_add_versions(role_clients, role, status):
    gpu = GpuTypeFactory()
    r = role_clients[role].post(reverse("catalog:gpu_cost_create", args=[gpu.pk]), {"basis": "rent", "rent_usd_per_hour": "2", "target_utilization": "1"})  # fmt: skip
    assert r.status_code == status
    assert not gpu_cost_versions(gpu_type_id=gpu.pk).exists()


def test_admin_adds_a_version_and_bad_input_is_a_400(admin_client):
    gpu = GpuTypeFactory()
    url = reverse("catalog:gpu_cost_create", args=[gpu.pk])
    bad = admin_client.post(url, {"basis": "rent", "rent_usd_per_hour": "2", "target_utilization": "1.5"})
    assert bad.status_code == 400 and "Target utilization must be in (0, 1]" in bad.content.decode()
    bad = admin_client.post(url, {"basis": "tco", "target_utilization": "1"})
    assert bad.status_code == 400 and "purchase price" in bad.content.decode()
    assert not gpu_cost_versions(gpu_type_id=gpu.pk).exists()
    ok = admin_client.post(url, {"basis": "tco", "purchase_price_usd": "25000", "depreciation_years": "5", "power_kw": "0.7",
                                 "pue": "1.2", "electricity_usd_per_kwh": "0.12", "datacenter_usd_per_month": "50",
                                 "target_utilization": "0.7", "pool": "online"})  # fmt: skip
    assert ok.status_code == 302
    v = gpu_cost_in_force(gpu_type_id=gpu.pk, pool="online")
    assert v.basis == "tco" and v.usd_per_gpu_hour > 0 and v.created_by.username == "admin"


def test_the_version_in_force_is_the_hourly_cost_pricing_uses(admin_user, member_client):
    from catalog.services import gpu_hourly_cost

    gpu = GpuTypeFactory()
    assert gpu_hourly_cost(gpu) == D("2.49")  # no version yet: the GPU type's rental figure
    v = gpu_cost_version_create(gpu_type=gpu, basis="rent", rent_usd_per_hour=D("3"), target_utilization=D("0.75"), actor=admin_user)  # fmt: skip
    assert gpu_hourly_cost(gpu) == D("4.0000")
    html = member_client.get(reverse("catalog:gpu_list")).content.decode()
    assert "$4.0000/h" in html
    detail = member_client.get(reverse("catalog:gpu_detail", args=[gpu.pk])).content.decode()
    assert f"cost version #{v.pk}" in detail
