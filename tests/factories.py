"""factory_boy factories shared by every app's tests."""

from __future__ import annotations

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from billing.models import Membership, Tenant
from catalog.models import GpuType, Model, ModelVersion


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw-for-tests-1")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = "member"


class GpuTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuType
        django_get_or_create = ("name",)

    name = "H100 SXM"
    memory_gib = Decimal("80")
    hbm_bandwidth_gbps = Decimal("3350")
    bf16_tflops = Decimal("989")
    fp8_tflops = Decimal("1979")
    interconnect = "NVLink"
    rental_usd_per_hour = Decimal("2.49")


class ModelFactory(factory.django.DjangoModelFactory):
    """Llama-3.1-8B's published architecture."""

    class Meta:
        model = Model
        django_get_or_create = ("name",)

    name = "Llama-3.1-8B-Instruct"
    family = "llama"
    parameter_count = 8_030_261_248
    layers = 32
    hidden_size = 4096
    attention_heads = 32
    kv_heads = 8
    head_dim = 128
    vocab_size = 128256
    max_context = 131072
    licence = "Llama 3.1 Community License"


class ModelVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelVersion

    model = factory.SubFactory(ModelFactory)
    label = factory.Sequence(lambda n: f"v{n}")
    weights_uri = "hf://meta-llama/Llama-3.1-8B-Instruct"
    precision = "bf16"
    kv_cache_dtype = "auto"
    framework = "vllm"
    lifecycle = "draft"


# A valid tiny architecture as a form or API body; tests override one field to make it impossible.
TINY_MODEL_FIELDS = {
    "name": "Tiny",
    "family": "llama",
    "parameter_count": 1000,
    "layers": 2,
    "hidden_size": 256,
    "attention_heads": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "vocab_size": 2000,
    "max_context": 2048,
}
