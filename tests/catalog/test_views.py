"""Catalog pages: every role on every view, filters, pagination, and forms that refuse bad values."""

import pytest
from django.urls import reverse

from catalog.models import Model, ModelVersion
from tests.factories import TINY_MODEL_FIELDS, GpuTypeFactory, ModelFactory, ModelVersionFactory


@pytest.fixture
def version(db):
    GpuTypeFactory()
    GpuTypeFactory(name="L40S", memory_gib=48, hbm_bandwidth_gbps=864, bf16_tflops=362, fp8_tflops=733)
    return ModelVersionFactory(label="bf16")


READ_PAGES = [
    ("catalog:version_list", False),
    ("catalog:version_detail", True),
    ("catalog:model_list", False),
    ("catalog:model_detail", "model"),
    ("catalog:gpu_list", False),
]


def _url(name, arg, version):
    if arg is True:
        return reverse(name, args=[version.pk])
    if arg == "model":
        return reverse(name, args=[version.model.pk])
    return reverse(name)


@pytest.mark.parametrize("name,arg", READ_PAGES)
@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200)]
)
def test_platform_users_read_catalog_pages(role_clients, version, name, arg, role, expected):
    assert role_clients[role].get(_url(name, arg, version)).status_code == expected


@pytest.mark.parametrize("name,arg", READ_PAGES)
def test_anonymous_is_sent_to_login(anon_client, version, name, arg):
    response = anon_client.get(_url(name, arg, version))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_user_without_any_role_gets_403(norole_client, version):
    assert norole_client.get(reverse("catalog:version_list")).status_code == 403


WRITE_PAGES = ["catalog:version_create", "catalog:model_create", "catalog:gpu_create"]


@pytest.mark.parametrize("name", WRITE_PAGES)
@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 403), ("member", 403), ("outsider", 403)]
)
def test_only_platform_admins_open_create_forms(role_clients, version, name, role, expected):
    assert role_clients[role].get(reverse(name)).status_code == expected


@pytest.mark.parametrize("role", ["auditor", "member", "outsider"])
def test_non_admins_cannot_post_a_model_or_move_a_lifecycle(role_clients, version, role):
    client = role_clients[role]
    before = Model.objects.count()
    assert client.post(reverse("catalog:model_create"), {"name": "x"}).status_code == 403
    assert (
        client.post(reverse("catalog:version_transition", args=[version.pk]), {"to": "candidate"}).status_code
        == 403
    )
    assert Model.objects.count() == before
    version.refresh_from_db()
    assert version.lifecycle == "draft"


def test_version_page_shows_estimate_per_gpu_and_does_not_fit(admin_client, db):
    GpuTypeFactory()
    GpuTypeFactory(name="L40S", memory_gib=48, hbm_bandwidth_gbps=864, bf16_tflops=362, fp8_tflops=733)
    big = ModelFactory(
        name="Llama-3.1-405B",
        parameter_count=405_000_000_000,
        layers=126,
        hidden_size=16384,
        attention_heads=128,
        kv_heads=8,
        head_dim=128,
    )
    version = ModelVersionFactory(model=big, label="bf16")
    html = admin_client.get(reverse("catalog:version_detail", args=[version.pk])).content.decode()
    assert "H100 SXM" in html and "L40S" in html
    assert html.count("does not fit") == 2  # 810 GB of weights fits on neither, even on 8 GPUs


def test_estimate_inputs_recompute_with_htmx_and_reject_bad_values(admin_client, version):
    url = reverse("catalog:version_detail", args=[version.pk])
    partial = admin_client.get(url, {"context_len": 8192}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    assert "<html" not in partial.content.decode() and "8,192" in partial.content.decode()
    bad = admin_client.get(url, {"gpu_memory_utilization": 3}, HTTP_HX_REQUEST="true")
    assert "gpu_memory_utilization" in bad.content.decode() and "less than or equal" in bad.content.decode()


def test_version_list_filters_and_paginates(admin_client, db):
    model = ModelFactory()
    for i in range(30):
        ModelVersionFactory(model=model, label=f"bf16-{i:02}", precision="bf16")
    ModelVersionFactory(model=model, label="fp8-a", precision="fp8")
    page1 = admin_client.get(reverse("catalog:version_list")).content.decode()
    assert "Page 1 of 2" in page1
    fp8 = admin_client.get(reverse("catalog:version_list"), {"precision": "fp8"}).content.decode()
    assert "fp8-a" in fp8 and "bf16-00" not in fp8


def test_version_list_query_count_does_not_grow_with_rows(admin_client, db, django_assert_max_num_queries):
    model = ModelFactory()
    for i in range(25):
        ModelVersionFactory(model=model, label=f"v{i}")
    with django_assert_max_num_queries(8):
        admin_client.get(reverse("catalog:version_list"))


VALID_MODEL = {**TINY_MODEL_FIELDS, "licence": ""}


@pytest.mark.parametrize(
    "override,field",
    [
        ({"layers": -1}, "layers"),
        ({"attention_heads": 3}, "attention_heads"),  # 256 % 3 != 0
        ({"kv_heads": 3}, "kv_heads"),  # 4 % 3 != 0
        ({"parameter_count": 0}, "parameter_count"),
    ],
)
def test_model_form_rejects_impossible_architecture_and_saves_nothing(admin_client, db, override, field):
    response = admin_client.post(
        reverse("catalog:model_create"), {**VALID_MODEL, **override}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 422
    assert f'data-field="{field}"' in response.content.decode()
    assert not Model.objects.filter(name="Tiny").exists()


def test_model_form_creates_with_htmx_redirect(admin_client, db):
    response = admin_client.post(reverse("catalog:model_create"), VALID_MODEL, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    model = Model.objects.get(name="Tiny")
    assert response["HX-Redirect"] == model.get_absolute_url()


def test_version_form_rejects_unknown_precision_and_records_creator(admin_client, admin_user, db):
    model = ModelFactory()
    data = {
        "model": model.pk,
        "label": "q",
        "weights_uri": "s3://w",
        "precision": "int3",
        "kv_cache_dtype": "auto",
        "framework": "vllm",
    }
    response = admin_client.post(reverse("catalog:version_create"), data, HTTP_HX_REQUEST="true")
    assert response.status_code == 422 and 'data-field="precision"' in response.content.decode()
    assert not ModelVersion.objects.filter(label="q").exists()
    admin_client.post(
        reverse("catalog:version_create"), {**data, "precision": "w4a16"}, HTTP_HX_REQUEST="true"
    )
    created = ModelVersion.objects.get(label="q")
    assert created.created_by == admin_user and created.lifecycle == "draft"


def test_lifecycle_moves_only_along_allowed_edges(admin_client, version):
    url = reverse("catalog:version_transition", args=[version.pk])
    admin_client.post(url, {"to": "serving"})  # draft → serving is not allowed
    version.refresh_from_db()
    assert version.lifecycle == "draft"
    admin_client.post(url, {"to": "candidate"})
    version.refresh_from_db()
    assert version.lifecycle == "candidate"


def test_gpu_list_shows_tco_hourly_cost_when_inputs_complete(admin_client, db):
    GpuTypeFactory(
        name="Owned H100",
        rental_usd_per_hour=2.49,
        purchase_price_usd=30000,
        depreciation_years=4,
        power_kw=0.7,
        pue=1.3,
        electricity_usd_per_kwh=0.10,
        datacenter_ops_usd_per_month=150,
    )
    html = admin_client.get(reverse("catalog:gpu_list")).content.decode()
    # 30000/(4*8766) + 0.7*1.3*0.10 + 150/730.5 = 0.8556 + 0.091 + 0.2053 = 1.1519
    assert "$1.1519/h" in html
