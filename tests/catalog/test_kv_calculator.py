"""The KV/memory what-if calculator on the catalog's estimator."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def params():
    v, g = llama_8b_version(), GpuTypeFactory()
    return {
        "version": v.pk,
        "gpu_type": g.pk,
        "tensor_parallel": 1,
        "context_len": 8192,
        "concurrency": 32,
        "kv_cache_dtype": "auto",
    }


@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200), ("anon", 302)]
)
def test_calculator_by_role(role_clients, role, status, params):
    assert role_clients[role].get(reverse("catalog:kv_calculator"), params).status_code == status


def test_kv_per_token_and_fit(member_client, params):
    html = member_client.get(reverse("catalog:kv_calculator"), params).content.decode()
    # Llama-3.1-8B bf16: 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 131072 B per token.
    assert 'id="kv-per-token">131072 B<' in html
    assert "Fits:" in html
    too_many = member_client.get(
        reverse("catalog:kv_calculator"), {**params, "context_len": 131072, "concurrency": 64}
    ).content.decode()
    assert "Does not fit" in too_many
    fp8 = member_client.get(
        reverse("catalog:kv_calculator"), {**params, "kv_cache_dtype": "fp8"}
    ).content.decode()
    assert 'id="kv-per-token">65536 B<' in fp8  # KV quantization halves it


def test_bad_input_is_a_400(member_client, params):
    r = member_client.get(reverse("catalog:kv_calculator"), {**params, "concurrency": 0})
    assert r.status_code == 400 and "greater than or equal to 1" in r.content.decode()
