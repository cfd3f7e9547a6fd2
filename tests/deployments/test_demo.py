"""The demo data: two simulated deployments with routes, created once, no preflight warnings."""

from __future__ import annotations

import pytest

from deployments.models import Deployment, ModelRoute
from deployments.selectors import routing_table
from deployments.services import deployment_preflight
from governor.demo import seed_demo

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_two_simulated_deployments_with_routes():
    seed_demo()
    seed_demo()  # idempotent
    # The evaluations demo adds candidate deployments (gates); these are the routed ones.
    deployments = list(Deployment.objects.live().filter(route_targets__isnull=False).order_by("slug"))
    assert [d.slug for d in deployments] == ["llama-3-1-8b-h100", "mistral-7b-l40s"]
    assert {d.engine_kind for d in deployments} == {"simulated"}
    assert [d.gpu_type.name for d in deployments] == ["H100 SXM", "L40S"]
    for d in deployments:
        preflight = deployment_preflight(deployment=d)
        assert preflight.ok and not preflight.warnings, preflight
    table = routing_table()
    assert set(table) == {"llama-3.1-8b", "mistral-7b"}
    assert table["llama-3.1-8b"]["targets"][0]["deployment_slug"] == "llama-3-1-8b-h100"
    assert table["mistral-7b"]["targets"][0]["engine_model"] == "Mistral-7B-Instruct-v0.3"
    assert ModelRoute.objects.count() == 2
