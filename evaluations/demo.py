"""Demo eval data: built-in suites, simulated quality profiles, FP8/INT4 candidates and gate policies.

``governor.demo.seed_demo`` calls ``seed_demo`` after the deployments demo, inside its transaction.
Only what is missing is created: a suite, profile, deployment or policy an admin changed is left
as it is. With it an admin can open the FP8 version of Llama 3.1 8B and run its gates in
predicted mode (quality on the simulated engines, performance and stability from the simulator);
the INT4 round-to-nearest candidate has a poor JSON-extraction profile and fails its quality gate.
"""

from __future__ import annotations

from catalog.selectors import (
    gpu_type_get,
    model_get,
    model_version_by_label,
    model_version_exists,
    model_version_queryset,
)
from catalog.services import model_version_create, model_version_set_quality_profile
from deployments.constants import EngineKind, Pool
from deployments.selectors import deployment_list
from deployments.services import deployment_create
from evaluations.models import GatePolicy
from evaluations.services.evals import eval_builtin_suites_register
from evaluations.services.gates import (
    DEFAULT_PERFORMANCE,
    DEFAULT_QUALITY,
    DEFAULT_STABILITY,
    gate_policy_save,
)

LLAMA = "Llama-3.1-8B-Instruct"
MISTRAL = "Mistral-7B-Instruct-v0.3"

# Probability of a right answer per category / context (engines.quality). FP8 sits a point under
# its bf16 baseline, which is within the gates' limits; INT4 RTN breaks structured output.
BF16_PROFILE = {
    "categories": {"arithmetic": 0.96, "json_extraction": 0.94, "refusal": 0.97},
    "by_context": {"1024": 0.97, "4096": 0.95, "16384": 0.9},
    "default": 0.93,
}
FP8_PROFILE = {
    "categories": {"arithmetic": 0.95, "json_extraction": 0.93, "refusal": 0.97},
    "by_context": {"1024": 0.96, "4096": 0.94, "16384": 0.89},
    "default": 0.92,
}
INT4_RTN_PROFILE = {
    "categories": {"arithmetic": 0.93, "json_extraction": 0.55, "refusal": 0.95},
    "by_context": {"1024": 0.95, "4096": 0.92, "16384": 0.85},
    "default": 0.9,
}
PROFILES = {
    (LLAMA, "bf16"): BF16_PROFILE,
    (LLAMA, "fp8"): FP8_PROFILE,
    (LLAMA, "int4-rtn"): INT4_RTN_PROFILE,
    (MISTRAL, "bf16"): BF16_PROFILE,
    (MISTRAL, "w8a8"): FP8_PROFILE,
}

EXTRA_VERSIONS = [
    {
        "model": LLAMA,
        "label": "int4-rtn",
        "precision": "w4a16",
        "weights_uri": "hf://example/Llama-3.1-8B-Instruct-INT4-RTN",
        "lifecycle": "candidate",
    }
]

# Simulated deployments of the candidates next to their baselines (same GPU type as the policy).
CANDIDATE_DEPLOYMENTS = [
    {"slug": "llama-3-1-8b-fp8-h100", "name": "Llama 3.1 8B FP8 · H100 (candidate)", "model": LLAMA,
     "label": "fp8", "gpu": "H100 SXM"},
    {"slug": "llama-3-1-8b-int4-h100", "name": "Llama 3.1 8B INT4 RTN · H100 (candidate)", "model": LLAMA,
     "label": "int4-rtn", "gpu": "H100 SXM"},
]  # fmt: skip

# Per model: the GPU type its gates run on, and limits sized for the demo (80 cases per built-in part).
POLICIES = {LLAMA: "H100 SXM", MISTRAL: "L40S"}
DEMO_QUALITY = {**DEFAULT_QUALITY, "default": {"max_drop": 0.12, "min_score": 0.6}}
DEMO_PERFORMANCE = {**DEFAULT_PERFORMANCE, "stage_duration_s": 30.0, "min_goodput_ratio": 0.95,
                    "min_kv_seqs": 16, "kv_context_tokens": 8192, "max_usd_per_mtok": 2.0}  # fmt: skip
DEMO_STABILITY = dict(DEFAULT_STABILITY)


def seed_demo(*, users: dict, tenants: dict, seed) -> None:
    """Create the eval demo the seed has not created before (``seed``: ``governor.demo.Seed``)."""
    actor = seed.actor  # the demo's rows are the seed's, not the demo admin's
    eval_builtin_suites_register(actor=actor)
    for spec in EXTRA_VERSIONS:
        model = model_get(name=spec["model"])
        if not model_version_exists(model_name=spec["model"], label=spec["label"]):
            model_version_create(
                actor=actor,
                model=model,
                label=spec["label"],
                precision=spec["precision"],
                weights_uri=spec["weights_uri"],
                lifecycle=spec["lifecycle"],
                baseline=model_version_by_label(model_name=spec["model"], label="bf16"),
            )
    for (model_name, label), profile in PROFILES.items():
        version = model_version_queryset().filter(model__name=model_name, label=label).first()
        if version is not None and not version.quality_profile:
            model_version_set_quality_profile(version=version, profile=profile, actor=actor)
    for spec in CANDIDATE_DEPLOYMENTS:
        key = f"deployment:{spec['slug']}"
        # Created once: a candidate deployment an admin deleted stays deleted (``--reset`` restores it).
        if not seed.wants(key) or deployment_list().filter(slug=spec["slug"]).exists():
            seed.created(key)
            continue
        version = model_version_by_label(model_name=spec["model"], label=spec["label"])
        if version.lifecycle in ("rejected", "retired"):
            continue
        deployment_create(
            actor=actor,
            name=spec["name"],
            slug=spec["slug"],
            model_version=version,
            engine_kind=EngineKind.SIMULATED,
            gpu_type=gpu_type_get(name=spec["gpu"]),
            tensor_parallel_size=1,
            pool=Pool.ONLINE,
            num_replicas=1,
            max_model_len=8192,
            max_num_seqs=48,
            max_num_batched_tokens=8192,
        )
        seed.created(key)
    for model_name, gpu_name in POLICIES.items():
        model = model_get(name=model_name)
        if GatePolicy.objects.filter(model=model).exists():
            continue
        gate_policy_save(
            model=model,
            gpu_type=gpu_type_get(name=gpu_name),
            quality=DEMO_QUALITY,
            performance=DEMO_PERFORMANCE,
            stability=DEMO_STABILITY,
            actor=actor,
            reason="demo policy",
        )
