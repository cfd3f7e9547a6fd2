"""Factories of the deployments tests."""

from __future__ import annotations

from decimal import Decimal

import factory
from django.utils import timezone

from catalog.models import ModelVersion
from deployments.models import Deployment, ModelRoute, RouteTarget
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory


class DeploymentFactory(factory.django.DjangoModelFactory):
    """A simulated Llama-3.1-8B bf16 on one H100, one replica, real-time clock."""

    class Meta:
        model = Deployment

    name = factory.Sequence(lambda n: f"Deployment {n}")
    slug = factory.Sequence(lambda n: f"dep-{n}")
    model_version = factory.LazyFunction(lambda: llama_8b_version())
    engine_kind = "simulated"
    gpu_type = factory.SubFactory(GpuTypeFactory)
    tensor_parallel_size = 1
    served_model_name = "llama-3.1-8b"
    max_model_len = 8192
    max_num_seqs = 32
    max_num_batched_tokens = 8192
    # As if the reconciler had just seen it: a status observed before the platform started would
    # read "unknown" (Deployment.display_status).
    observed_at = factory.LazyFunction(timezone.now)


class ModelRouteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelRoute

    public_name = factory.Sequence(lambda n: f"model-{n}")


class RouteTargetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RouteTarget

    route = factory.SubFactory(ModelRouteFactory)
    deployment = factory.SubFactory(DeploymentFactory)
    weight = 100


def llama_8b_version():
    """The (one) Llama-3.1-8B bf16 version, shared by every factory-made deployment.

    It is *serving*: routes carry production traffic and take only approved or serving versions.
    """
    model = ModelFactory()
    return ModelVersion.objects.filter(model=model, label="bf16").first() or ModelVersionFactory(
        model=model, label="bf16", lifecycle="serving"
    )


def l40s():
    return GpuTypeFactory(
        name="L40S",
        memory_gib=Decimal("48"),
        hbm_bandwidth_gbps=Decimal("864"),
        bf16_tflops=Decimal("362"),
        fp8_tflops=Decimal("733"),
        interconnect="PCIe Gen4 x16",
        rental_usd_per_hour=Decimal("0.99"),
    )


def llama_70b_version(label: str = "bf16", precision: str = "bf16"):
    model = ModelFactory(
        name="Llama-3.1-70B-Instruct",
        parameter_count=70_553_706_496,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
    )
    return ModelVersionFactory(
        model=model, label=label, precision=precision, weights_uri="hf://meta-llama/Llama-3.1-70B-Instruct"
    )
