"""The cost pages moved under /cost/ (ADR 0027): old addresses and URL names still lead to them."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_the_cost_pages_are_mounted_at_cost():
    token = uuid.uuid4()
    assert reverse("cost:derived_prices") == "/cost/prices/"
    assert reverse("cost:derived_price_publish") == "/cost/prices/publish/"
    assert reverse("cost:plan_list") == "/cost/plans/"
    assert reverse("cost:plan_create") == "/cost/plans/new/"
    assert reverse("cost:plan_detail", args=[token]) == f"/cost/plans/{token}/"
    assert reverse("cost:gpu_costs") == "/cost/gpus/"


@pytest.mark.parametrize(
    "old, new",
    [
        ("/benchmarks/prices/", "/cost/prices/"),
        ("/benchmarks/plans/", "/cost/plans/"),
        ("/benchmarks/plans/3f0c1e5e-6a53-4c4e-9a43-0d4b3d1f2a10/?part=progress",
         "/cost/plans/3f0c1e5e-6a53-4c4e-9a43-0d4b3d1f2a10/?part=progress"),
        ("/deployments/costs/?since=2026-11-01&until=2026-11-10", "/cost/gpus/?since=2026-11-01&until=2026-11-10"),
    ],
)  # fmt: skip
def test_a_bookmark_of_a_moved_page_is_redirected_for_good(admin_client, old, new):
    r = admin_client.get(old)
    assert r.status_code in (301, 308) and r["Location"] == new
    assert admin_client.get(old, follow=True).status_code in (200, 404)  # 404: no such plan, as before


def test_the_old_names_still_reverse_and_an_old_form_keeps_its_post(admin_client):
    assert reverse("evaluations:derived_prices") == "/benchmarks/prices/"
    assert reverse("deployments:gpu_costs") == "/deployments/costs/"
    r = admin_client.post(reverse("evaluations:plan_create"), {"name": "from an old page"})
    # 308 keeps the method and the body: the browser posts the form again to the new address.
    assert r.status_code == 308 and r["Location"] == "/cost/plans/new/"
    r = admin_client.post(reverse("evaluations:derived_price_publish"), {"public_model": "m"})
    assert r.status_code == 308 and r["Location"] == "/cost/prices/publish/"
