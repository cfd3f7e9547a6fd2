"""A route holds budget per image at its model's bound from the catalog, carried in the snapshot.

The default for a model whose bound is unknown is checked against a vision encoder's own arithmetic
(Qwen2-VL's ``smart_resize`` in ``transformers``), not against the constant itself."""

from __future__ import annotations

import orjson
import pytest

from deployments.selectors import routing_table
from snapshot.contract import DEFAULT_TOKENS_PER_IMAGE, parse_snapshot
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory
from tests.factories import ModelFactory, ModelVersionFactory

# Qwen2-VL-7B-Instruct's published preprocessor_config.json: "max_pixels": 12845056; one token per
# 28x28 pixels after the 2x2 merge of 14-pixel patches.
QWEN2_VL_MAX_PIXELS = 12_845_056
QWEN2_VL_PIXELS_PER_TOKEN = 28


def test_the_default_covers_the_largest_image_a_common_encoder_counts():
    qwen = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    most = 0
    for h, w in [(3584, 3584), (8000, 8000), (4000, 3000), (1080, 1920), (20000, 200), (512, 512)]:
        rh, rw = qwen.smart_resize(h, w, factor=QWEN2_VL_PIXELS_PER_TOKEN, max_pixels=QWEN2_VL_MAX_PIXELS)
        most = max(most, (rh // QWEN2_VL_PIXELS_PER_TOKEN) * (rw // QWEN2_VL_PIXELS_PER_TOKEN))
    assert most > 4096  # the old flat allowance was below what the encoder counts
    assert most <= DEFAULT_TOKENS_PER_IMAGE


def _version(name: str, per_image: int | None):
    return ModelVersionFactory(model=ModelFactory(name=name, max_tokens_per_image=per_image))


@pytest.mark.django_db
def test_the_catalogs_bound_reaches_the_gateways_route():
    known = RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING", model_version=_version("Qwen2-VL-7B-Instruct", 1_200)),
        route__public_name="vision",
    )
    table = routing_table()
    assert [t["tokens_per_image"] for t in table["vision"]["targets"]] == [1_200]
    snap = parse_snapshot(orjson.dumps({"routes": table}))
    assert snap.routes["vision"].tokens_per_image == 1_200
    # A second target whose model does not say: the route holds the larger, unknown, bound.
    RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING", model_version=_version("Some-VLM", None)),
        route=known.route,
    )
    snap = parse_snapshot(orjson.dumps({"routes": routing_table()}))
    assert snap.routes["vision"].tokens_per_image == DEFAULT_TOKENS_PER_IMAGE


@pytest.mark.django_db
def test_the_model_page_says_what_the_gateway_holds_per_image(admin_client):
    from django.urls import reverse

    known = ModelFactory(name="Qwen2-VL-7B-Instruct", max_tokens_per_image=1_200)
    unknown = ModelFactory(name="Some-VLM", max_tokens_per_image=None)
    page = admin_client.get(reverse("catalog:model_detail", args=[known.pk])).content.decode()
    assert 'Max tokens per image</dt><dd class="col-sm-10">1200</dd>' in page
    page = admin_client.get(reverse("catalog:model_detail", args=[unknown.pk])).content.decode()
    assert "unknown: the gateway holds budget for 16,384 per image" in page
