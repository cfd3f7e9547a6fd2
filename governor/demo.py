"""Demo data: public datasheet and config.json figures, two tenants and one user per role.

Policy (docs/decisions/0011): ``seed_demo`` creates only what is missing and never changes what
exists. It remembers every object it created (``governor.models.DemoSeedRecord``), so an object an
admin edited keeps the edit and one they deleted is not recreated at the next start.
``seed_demo(reset=True)`` (``manage.py seed_demo --reset``) restores the demo on purpose. Every
write goes through the owning app's services with the actor ``system:seed``.

Sources: NVIDIA H100/H200/A100/L40S datasheets (dense, no sparsity); each model's config.json on
its publisher's model card. Rental prices are typical on-demand cloud list prices in 2025-26.
"""

from __future__ import annotations

import logging
from decimal import Decimal as D

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from billing.selectors.tenancy import membership_role, tenant_by_slug
from billing.services.tenancy import membership_set, tenant_create, tenant_update
from catalog.constants import LIFECYCLE_TRANSITIONS, Lifecycle
from catalog.selectors import gpu_type_list, model_list, model_version_list
from catalog.services import (
    gpu_type_create,
    gpu_type_update,
    model_create,
    model_update,
    model_version_create,
    model_version_transition,
)
from core.access import AUDITOR_GROUP
from deployments import demo as deployments_demo
from deployments.selectors import route_list
from evaluations import demo as evaluations_demo
from governor.models import DemoSeedRecord
from notify import services as notify_services
from operations import selectors as operations_selectors
from operations import services as operations_services

log = logging.getLogger(__name__)

SEED_ACTOR = "system:seed"

GPU_TYPES = [
    dict(
        name="H100 SXM",
        memory_gib=D("80"),
        # Driver-reported totals (ADR 0021): nvidia-smi "MiB" and, where a vLLM log shows it, CUDA's total.
        memory_mib=81559,
        cuda_total_mib=81121,
        memory_source="nvidia-smi 81559MiB on driver 550.90.07 (https://github.com/wilicc/gpu-burn/issues/114); "
        "CUDA total 79.22 GiB from vLLM's profile log (https://github.com/vllm-project/vllm/pull/10511)",
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
        memory_mib=143771,
        memory_source="nvidia-smi 143771MiB (140.4 GiB) for H200 SXM 141GB, the figure issue 31 quotes; "
        "no published nvidia-smi output was found to link: confirm on a device",
        hbm_bandwidth_gbps=D("4800"),
        bf16_tflops=D("989"),
        fp8_tflops=D("1979"),
        interconnect="NVLink 4 (900 GB/s)",
        rental_usd_per_hour=D("3.49"),
    ),
    dict(
        name="A100 80GB",
        memory_gib=D("80"),
        memory_mib=81920,
        memory_source="nvidia-smi 81920MiB (https://github.com/modal-labs/modal-client/pull/2797; "
        "A800 80GB on driver 550.54.15: https://github.com/vllm-project/vllm/issues/41519)",
        hbm_bandwidth_gbps=D("2039"),
        bf16_tflops=D("312"),
        fp8_tflops=None,
        interconnect="NVLink 3 (600 GB/s)",
        rental_usd_per_hour=D("1.79"),
    ),
    dict(
        name="L40S",
        memory_gib=D("48"),
        memory_mib=46068,
        memory_source="nvidia-smi 46068MiB on driver 590.44.01 (https://github.com/wtdcode/vllm-backport/issues/14; "
        "also https://github.com/modal-labs/modal-client/pull/2797)",
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
        intermediate_size=14336,
        tie_word_embeddings=False,
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
        intermediate_size=28672,
        tie_word_embeddings=False,
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
        intermediate_size=27648,
        tie_word_embeddings=False,
        attention_bias=True,
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
        intermediate_size=14336,
        tie_word_embeddings=False,
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
        "awq",
        "auto",
        "hf://hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
        Lifecycle.DRAFT,
    ),
    ("Qwen2.5-32B-Instruct", "bf16", "bf16", "auto", "hf://Qwen/Qwen2.5-32B-Instruct", Lifecycle.APPROVED),
    (
        "Qwen2.5-32B-Instruct",
        "gptq-int4",
        "gptq",
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


class Seed:
    """What the seed created before, and the decision for each demo object.

    ``wants(key)``: create the object? Only when the seed never created it (or on reset).
    ``created(key)``: remember that the seed made it (or found it made already).
    ``reset``: restore demo values of objects that exist, recreate deleted ones.
    """

    actor = SEED_ACTOR

    def __init__(self, *, reset: bool) -> None:
        self.reset = reset
        self.known = set(DemoSeedRecord.objects.values_list("key", flat=True))
        self.notes: list[str] = []

    def wants(self, key: str) -> bool:
        return self.reset or key not in self.known

    def created(self, key: str) -> None:
        if key not in self.known:
            DemoSeedRecord.objects.get_or_create(key=key)
            self.known.add(key)

    def note(self, message: str) -> None:
        log.info("seed_demo: %s", message)
        self.notes.append(message)


def _changed(obj, fields: dict) -> dict:
    return {k: v for k, v in fields.items() if getattr(obj, k) != v}


def _seed_gpus(seed: Seed) -> None:
    for fields in GPU_TYPES:
        key = f"gpu_type:{fields['name']}"
        if not seed.wants(key):
            continue
        existing = gpu_type_list().filter(name=fields["name"]).first()
        if existing is None:
            gpu_type_create(actor=seed.actor, **fields)
        elif seed.reset and (diff := _changed(existing, fields)):
            gpu_type_update(gpu_type=existing, actor=seed.actor, **diff)
        seed.created(key)


def _seed_models(seed: Seed) -> dict:
    for fields in MODELS:
        key = f"model:{fields['name']}"
        if not seed.wants(key):
            continue
        existing = model_list().filter(name=fields["name"]).first()
        if existing is None:
            model_create(actor=seed.actor, **fields)
        elif seed.reset and (diff := _changed(existing, fields)):
            model_update(model=existing, actor=seed.actor, **diff)
        seed.created(key)
    return {m.name: m for m in model_list().filter(name__in=[f["name"] for f in MODELS])}


def _seed_users(seed: Seed) -> dict:
    """Users are Django's, not a governed app's: created when missing, passwords set on creation
    (and on reset)."""
    User = get_user_model()
    users = {}
    auditors, _ = Group.objects.get_or_create(name=AUDITOR_GROUP)
    for username, password, role, _tenant in USERS:
        key = f"user:{username}"
        user = User.objects.filter(username=username).first()
        if seed.wants(key) and (user is None or seed.reset):
            if user is None:
                user = User(username=username, email=f"{username}@example.com")
            user.set_password(password)
            user.is_active = True
            user.is_superuser = user.is_staff = role == "platform admin"
            user.save()
            if role == "auditor":
                user.groups.add(auditors)
        if seed.wants(key):
            seed.created(key)
        if user is not None:
            users[username] = user
    return users


def _seed_versions(seed: Seed, models: dict) -> None:
    baselines: dict = {}
    for model_name, label, precision, kv, uri, lifecycle in VERSIONS:
        key = f"model_version:{model_name}:{label}"
        model = models.get(model_name)
        existing = model_version_list().filter(model__name=model_name, label=label).first()
        if existing is not None:
            baselines.setdefault(model_name, existing)
        if model is None or not seed.wants(key):
            continue
        if existing is None:
            version = model_version_create(
                actor=seed.actor,
                model=model,
                label=label,
                weights_uri=uri,
                precision=precision,
                kv_cache_dtype=kv,
                framework="vllm",
                lifecycle=lifecycle,
                baseline=baselines.get(model_name),
            )
            baselines.setdefault(model_name, version)
        elif seed.reset and existing.lifecycle != lifecycle:
            if lifecycle in LIFECYCLE_TRANSITIONS.get(existing.lifecycle, set()):
                model_version_transition(version=existing, to=lifecycle, actor=seed.actor)
            else:
                seed.note(
                    f"{model_name} {label} stays {existing.lifecycle}: the lifecycle does not lead back to {lifecycle}"
                )
        seed.created(key)


def _seed_tenants(seed: Seed, users: dict) -> dict:
    tenants = {}
    for name, slug in TENANTS:
        key = f"tenant:{slug}"
        tenant = tenant_by_slug(slug=slug)
        if seed.wants(key):
            if tenant is None:
                tenant = tenant_create(name=name, slug=slug, actor=seed.actor)
            elif seed.reset:
                tenant = tenant_update(tenant=tenant, name=name, is_active=True, actor=seed.actor)
            seed.created(key)
        if tenant is not None:
            tenants[slug] = tenant
    for username, _password, role, slug in USERS:
        if not slug:
            continue
        key = f"membership:{slug}:{username}"
        user, tenant = users.get(username), tenants.get(slug)
        if user is None or tenant is None or not seed.wants(key):
            continue
        wanted = "admin" if role == "tenant admin" else "member"
        current = membership_role(user=user, tenant_id=tenant.pk)
        if current is None or (seed.reset and current != wanted):
            membership_set(user=user, tenant=tenant, role=wanted, actor=seed.actor)
        seed.created(key)
    return tenants


@transaction.atomic
def _seed_rota(seed: Seed, users: dict) -> None:
    """An on-call rota of the demo's platform admin, so that signals page someone from the start."""
    if not seed.wants("rota:platform") or "admin" not in users:
        return
    notify_services.rota_set(
        name="Platform on-call",
        usernames=["admin"],
        shift_hours=168,
        escalate_after_minutes=15,
        handover_at=timezone.now().replace(minute=0, second=0, microsecond=0),
        actor=SEED_ACTOR,
    )
    seed.created("rota:platform")


def _seed_slos(seed: Seed) -> None:
    """Two SLOs on each demo route (first token within a second for 99 %, no server error for
    99.5 %), so route pages show their burn rates from the first requests on."""
    for route in route_list():
        key = f"slos:{route.public_name}"
        if not seed.wants(key) or operations_selectors.slos_of_route(route_id=route.pk).exists():
            seed.created(key)
            continue
        operations_services.slo_create(
            route=route, kind="ttft", threshold_ms=1000, target="0.99", actor=SEED_ACTOR
        )
        operations_services.slo_create(route=route, kind="errors", target="0.995", actor=SEED_ACTOR)
        seed.created(key)


def seed_demo(*, reset: bool = False) -> list[tuple[str, str, str]]:
    """Create what of the demo is missing (or, with ``reset``, restore it); returns the demo logins."""
    seed = Seed(reset=reset)
    _seed_gpus(seed)
    models = _seed_models(seed)
    users = _seed_users(seed)
    _seed_versions(seed, models)
    tenants = _seed_tenants(seed, users)
    # The apps' own demo data: deployments and routes, then eval suites, profiles and gate policies.
    deployments_demo.seed_demo(users=users, tenants=tenants, seed=seed)
    evaluations_demo.seed_demo(users=users, tenants=tenants, seed=seed)
    _seed_rota(seed, users)
    _seed_slos(seed)
    return [(u, p, r + (f" ({t})" if t else "")) for u, p, r, t in USERS]
