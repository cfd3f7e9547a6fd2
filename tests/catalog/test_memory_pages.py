"""Where memory goes, on every page that estimates it, and bad input refused by name (issue 31, item 1)."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from catalog import services
from catalog.models import GpuType, Model, ModelVersion
from governor.demo import GPU_TYPES
from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db

L40S = next(f for f in GPU_TYPES if f["name"] == "L40S")


@pytest.fixture
def l40s_driver():
    """The catalog's L40S preset: nvidia-smi's 46068 MiB, with its source."""
    return GpuTypeFactory(**L40S)


@pytest.fixture
def params(l40s_driver):
    return {
        "version": llama_8b_version().pk,
        "gpu_type": l40s_driver.pk,
        "tensor_parallel": 1,
        "context_len": 8192,
        "concurrency": 8,
        "kv_cache_dtype": "auto",
    }


def _rows(html: str, table_id: str) -> dict[str, str]:
    table = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    return dict(re.findall(r'data-part="([a-z_]+)">([^<]+)<', table))


def test_kv_calculator_shows_weights_by_part_reserve_kv_pool_and_the_memory_source(member_client, params):
    html = member_client.get(reverse("catalog:kv_calculator"), params).content.decode()
    parts = _rows(html, "kv-figures")
    assert set(parts) == {
        "embeddings",
        "layers",
        "lm_head",
        "non_torch",
        "activation",
        "cuda_graphs",
        "kv_pool",
        "tokens",
    }
    assert parts["embeddings"] == parts["lm_head"] == "1002.0\xa0MB"  # 128256 x 4096 x 2 bytes, untied
    assert "46068MiB on driver 590.44.01" in html  # the figure's source travels with it
    assert "44.99\xa0GB per GPU" in html or "45.0\xa0GB per GPU" in html


def test_version_page_splits_weights_and_reserve_per_gpu_type(admin_client, l40s_driver):
    version = llama_8b_version()
    html = admin_client.get(reverse("catalog:version_detail", args=[version.pk])).content.decode()
    assert "Weights (embeddings + layers + lm_head)" in html
    assert "Non-torch + activation peak + CUDA graphs" in html
    assert "nvidia-smi 46068MiB" in html


@pytest.mark.parametrize(
    "override,named",
    [
        ({"gpu_type": 999_999}, "Unknown GPU type 999999"),
        ({"kv_cache_dtype": "int8"}, "Unknown KV-cache dtype int8"),
        ({"version": 999_999}, "Unknown model version 999999"),
    ],
)
def test_kv_calculator_refuses_what_it_does_not_know_by_name(member_client, params, override, named):
    r = member_client.get(reverse("catalog:kv_calculator"), {**params, **override})
    assert r.status_code == 400
    assert named in r.content.decode()
    assert 'id="kv-figures"' not in r.content.decode()  # no estimate is guessed


def test_api_estimate_splits_weights_and_keeps_awq_embeddings_16bit(member_client, l40s_driver):
    version = llama_8b_version()
    url = f"/api/catalog/versions/{version.pk}/memory-estimates/"
    (row,) = member_client.get(url, {"gpu": "L40S", "weight_precision": "awq"}).json()
    assert row["weight_embedding_bytes"] == row["weight_lm_head_bytes"] == 128256 * 4096 * 2
    assert row["memory_per_gpu_bytes"] == 46068 * 1024**2
    assert "46068MiB" in row["memory_source"]
    assert row["kv_capacity_tokens"] == row["kv_blocks"] * 16
    assert row["accounting"].startswith("vLLM V1")


@pytest.mark.parametrize(
    "query,named",
    [
        ({"gpu": "B300"}, "Unknown GPU type 'B300'"),
        ({"weight_precision": "int3"}, 'int3\\" is not a valid choice'),
        ({"kv_cache_dtype": "q8_0"}, 'q8_0\\" is not a valid choice'),
        ({"gpu_memory_utilization": "1.5"}, "less than or equal to 1"),
    ],
)
def test_api_refuses_unknown_names_with_a_400_that_names_them(member_client, l40s_driver, query, named):
    version = llama_8b_version()
    r = member_client.get(f"/api/catalog/versions/{version.pk}/memory-estimates/", query)
    assert r.status_code == 400
    assert named in r.content.decode()


@pytest.mark.parametrize(
    "kwargs,named",
    [({"precision": "int3"}, "'int3'"), ({"kv_cache_dtype": "q8_0"}, "'q8_0'"), ({"gpu_type": None}, "None")],
)
def test_the_service_raises_a_named_error_never_a_guess(l40s_driver, kwargs, named):
    version = llama_8b_version()
    args = {"model": version.model, "gpu_type": l40s_driver, "precision": "bf16", **kwargs}
    with pytest.raises(ValidationError, match=re.escape(named)):
        services.memory_estimate(**args)


def test_a_cuda_total_above_the_driver_total_is_refused_and_saves_nothing(admin_client):
    body = {
        **{k: str(v) for k, v in L40S.items() if v is not None},
        "name": "L40S-bad",
        "cuda_total_mib": 50000,
    }
    r = admin_client.post("/api/catalog/gpu-types/", body, content_type="application/json")
    assert r.status_code == 400 and "cuda_total_mib" in r.json()
    assert not GpuType.objects.filter(name="L40S-bad").exists()


def test_old_l40s_figure_overstated_70b_awq_capacity():
    """Issue 31: 27,248 tokens of KV for Llama-3.1-70B AWQ on one L40S, from 48 GB and quantized embeddings.

    With the driver's 46068 MiB and 16-bit embeddings/lm_head the weights alone leave under 2 GiB per
    GPU after vLLM's profile: a few thousand tokens, not enough for one 4k sequence.
    """
    model = Model.objects.create(
        name="Llama-3.1-70B-Instruct",
        family="llama",
        parameter_count=70_553_706_496,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_context=131072,
        intermediate_size=28672,
    )
    gpu = GpuType.objects.create(**L40S)
    est = services.memory_estimate(model=model, gpu_type=gpu, precision="awq", context_len=8192)
    assert 36.5 < est.weight_bytes / 1024**3 < 37.5  # hugging-quants' AWQ checkpoint is 37.1 GiB on disk
    assert est.kv_capacity_tokens < 8_000  # the old estimate said 27,248
    assert est.max_concurrent_seqs == 0  # not one sequence of 8k
    assert ModelVersion.objects.count() == 0
