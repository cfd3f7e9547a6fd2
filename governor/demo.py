"""Demo data: public datasheet and config.json figures, two tenants and one user per role.

Sources: NVIDIA H100/H200/A100/L40S datasheets (dense, no sparsity); each model's config.json on
its publisher's model card. Rental prices are typical on-demand cloud list prices in 2025-26.
"""

from __future__ import annotations

import importlib
from decimal import Decimal as D

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from billing.models import Membership, Tenant
from catalog.constants import Lifecycle
from catalog.models import GpuType, Model, ModelVersion
from governor.access import AUDITOR_GROUP

GPU_TYPES = [
    dict(
        name="H100 SXM",
        memory_gib=D("80"),
        hbm_bandwidth_gbps=D("3350"),
        bf16_tflops=D("989"),
        fp8_tflops=D("1979"),
        interconnect="NVLink 4 (900 GB/s)",
        rental_usd_per_hour=D("2.49"),
        purchase_price_usd=D("30000"),
        depreciation_years=D("4"),
        power_kw=D("0.7"),
        pue=D("1.3"),
        electricity_usd_per_kwh=D("0.10"),
        datacenter_ops_usd_per_month=D("150"),
    ),
    dict(
        name="H200",
        memory_gib=D("141"),
        hbm_bandwidth_gbps=D("4800"),
        bf16_tflops=D("989"),
        fp8_tflops=D("1979"),
        interconnect="NVLink 4 (900 GB/s)",
        rental_usd_per_hour=D("3.49"),
    ),
    dict(
        name="A100 80GB",
        memory_gib=D("80"),
        hbm_bandwidth_gbps=D("2039"),
        bf16_tflops=D("312"),
        fp8_tflops=None,
        interconnect="NVLink 3 (600 GB/s)",
        rental_usd_per_hour=D("1.79"),
    ),
    dict(
        name="L40S",
        memory_gib=D("48"),
        hbm_bandwidth_gbps=D("864"),
        bf16_tflops=D("362"),
        fp8_tflops=D("733"),
        interconnect="PCIe Gen4 x16",
        rental_usd_per_hour=D("0.99"),
    ),
]

MODELS = [
    dict(
        name="Llama-3.1-8B-Instruct",
        family="llama",
        parameter_count=8_030_261_248,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_context=131072,
        licence="Llama 3.1 Community License",
    ),
    dict(
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
        licence="Llama 3.1 Community License",
    ),
    dict(
        name="Qwen2.5-32B-Instruct",
        family="qwen",
        parameter_count=32_763_876_352,
        layers=64,
        hidden_size=5120,
        attention_heads=40,
        kv_heads=8,
        head_dim=128,
        vocab_size=152064,
        max_context=32768,
        licence="Apache-2.0",
    ),
    dict(
        name="Mistral-7B-Instruct-v0.3",
        family="mistral",
        parameter_count=7_248_023_552,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        vocab_size=32768,
        max_context=32768,
        licence="Apache-2.0",
    ),
]

# (model, label, precision, kv dtype, weights URI, lifecycle); the quantized one has the bf16 as baseline.
VERSIONS = [
    (
        "Llama-3.1-8B-Instruct",
        "bf16",
        "bf16",
        "auto",
        "hf://meta-llama/Llama-3.1-8B-Instruct",
        Lifecycle.SERVING,
    ),
    (
        "Llama-3.1-8B-Instruct",
        "fp8",
        "fp8",
        "fp8",
        "hf://neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
        Lifecycle.CANDIDATE,
    ),
    (
        "Llama-3.1-70B-Instruct",
        "bf16",
        "bf16",
        "auto",
        "hf://meta-llama/Llama-3.1-70B-Instruct",
        Lifecycle.APPROVED,
    ),
    (
        "Llama-3.1-70B-Instruct",
        "awq-int4",
        "w4a16",
        "auto",
        "hf://hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
        Lifecycle.DRAFT,
    ),
    ("Qwen2.5-32B-Instruct", "bf16", "bf16", "auto", "hf://Qwen/Qwen2.5-32B-Instruct", Lifecycle.APPROVED),
    (
        "Qwen2.5-32B-Instruct",
        "gptq-int4",
        "w4a16",
        "auto",
        "hf://Qwen/Qwen2.5-32B-Instruct-GPTQ-Int4",
        Lifecycle.CANDIDATE,
    ),
    (
        "Mistral-7B-Instruct-v0.3",
        "bf16",
        "bf16",
        "auto",
        "hf://mistralai/Mistral-7B-Instruct-v0.3",
        Lifecycle.SERVING,
    ),
    (
        "Mistral-7B-Instruct-v0.3",
        "w8a8",
        "w8a8",
        "auto",
        "hf://neuralmagic/Mistral-7B-Instruct-v0.3-quantized.w8a8",
        Lifecycle.DRAFT,
    ),
]

TENANTS = [("Acme Search", "acme"), ("Globex Support", "globex")]

# username, password, role, tenant slug (for tenant roles)
USERS = [
    ("admin", "governor-admin", "platform admin", None),
    ("auditor", "governor-auditor", "auditor", None),
    ("alice", "governor-alice", "tenant admin", "acme"),
    ("bob", "governor-bob", "tenant member", "acme"),
    ("carol", "governor-carol", "tenant member", "globex"),
]

# Apps built by later issues add their demo data through a ``seed_demo()`` in these modules.
EXTENSIONS = ["deployments.demo", "billing.demo_gateway", "evaluations.demo"]


@transaction.atomic
def seed_demo() -> list[tuple[str, str, str]]:
    """Create or refresh the demo data; returns the demo logins (username, password, role)."""
    for fields in GPU_TYPES:
        GpuType.objects.update_or_create(name=fields["name"], defaults=fields)
    models = {}
    for fields in MODELS:
        models[fields["name"]], _ = Model.objects.update_or_create(name=fields["name"], defaults=fields)
    User = get_user_model()
    users = {}
    auditors, _ = Group.objects.get_or_create(name=AUDITOR_GROUP)
    for username, password, role, _tenant in USERS:
        user, created = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        if created:
            user.set_password(password)
        user.is_superuser = user.is_staff = role == "platform admin"
        user.save()
        if role == "auditor":
            user.groups.add(auditors)
        users[username] = user
    baselines: dict[str, ModelVersion] = {}
    for model_name, label, precision, kv, uri, lifecycle in VERSIONS:
        version, _ = ModelVersion.objects.update_or_create(
            model=models[model_name],
            label=label,
            defaults=dict(
                weights_uri=uri,
                precision=precision,
                kv_cache_dtype=kv,
                framework="vllm",
                lifecycle=lifecycle,
                baseline=baselines.get(model_name),
                created_by=users["admin"],
            ),
        )
        baselines.setdefault(model_name, version)
    tenants = {}
    for name, slug in TENANTS:
        tenants[slug], _ = Tenant.objects.update_or_create(slug=slug, defaults={"name": name})
    for username, _password, role, tenant_slug in USERS:
        if tenant_slug:
            Membership.objects.update_or_create(
                user=users[username],
                tenant=tenants[tenant_slug],
                defaults={"role": "admin" if role == "tenant admin" else "member"},
            )
    for module_name in EXTENSIONS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.seed_demo(users=users, tenants=tenants)
    return [(u, p, r + (f" ({t})" if t else "")) for u, p, r, t in USERS]
