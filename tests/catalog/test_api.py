"""Catalog REST API: permissions per role, validation, lifecycle and memory estimates."""

import pytest

from catalog.models import Model
from tests.factories import TINY_MODEL_FIELDS, GpuTypeFactory, ModelVersionFactory

VALID_MODEL = TINY_MODEL_FIELDS


@pytest.fixture
def version(db):
    GpuTypeFactory()
    return ModelVersionFactory(label="bf16")


@pytest.mark.parametrize(
    "path", ["/api/catalog/versions/", "/api/catalog/models/", "/api/catalog/gpu-types/"]
)
@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200), ("anon", 401)]
)
def test_read_endpoints_by_role(role_clients, version, path, role, expected):
    assert role_clients[role].get(path).status_code == expected


@pytest.mark.parametrize(
    "role,expected", [("admin", 201), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 401)]
)
def test_only_admins_create_models(role_clients, db, role, expected):
    response = role_clients[role].post("/api/catalog/models/", VALID_MODEL, content_type="application/json")
    assert response.status_code == expected
    assert Model.objects.filter(name="Tiny").exists() == (expected == 201)


@pytest.mark.parametrize(
    "override,field",
    [
        ({"hidden_size": -5}, "hidden_size"),
        ({"attention_heads": 3}, "attention_heads"),
        ({"kv_heads": 3}, "kv_heads"),
        ({"layers": "many"}, "layers"),
    ],
)
def test_api_rejects_impossible_values_with_field_errors(admin_client, db, override, field):
    response = admin_client.post(
        "/api/catalog/models/", {**VALID_MODEL, **override}, content_type="application/json"
    )
    assert response.status_code == 400 and field in response.json()
    assert not Model.objects.filter(name="Tiny").exists()


def test_version_create_rejects_unknown_precision(admin_client, version):
    body = {"model": version.model_id, "label": "x", "weights_uri": "s3://x", "precision": "int3"}
    response = admin_client.post("/api/catalog/versions/", body, content_type="application/json")
    assert response.status_code == 400 and "precision" in response.json()


def test_transition_endpoint_moves_lifecycle_and_refuses_bad_edges(admin_client, auditor_client, version):
    url = f"/api/catalog/versions/{version.pk}/transition/"
    assert auditor_client.post(url, {"to": "candidate"}, content_type="application/json").status_code == 403
    assert admin_client.post(url, {"to": "serving"}, content_type="application/json").status_code == 400
    ok = admin_client.post(url, {"to": "candidate"}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["lifecycle"] == "candidate"


def test_memory_estimates_endpoint(member_client, version):
    rows = member_client.get(f"/api/catalog/versions/{version.pk}/memory-estimates/").json()
    assert rows[0]["gpu"] == "H100 SXM" and rows[0]["fits"] is True
    assert rows[0]["kv_bytes_per_token"] == 131072


def test_openapi_schema_lists_catalog_endpoints(admin_client):
    response = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/catalog/versions/{id}/transition/" in paths
