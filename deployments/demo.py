"""Demo deployments: two simulated engines that come up RUNNING when the platform starts, and routes.

``governor.demo.seed_demo`` calls ``seed_demo`` inside its transaction; the reconcile enqueued on
commit waits in Redis until the worker starts, then retries until the local Ray head answers.
"""

from __future__ import annotations

from catalog.selectors import gpu_type_get, model_version_by_label
from deployments import services
from deployments.constants import EngineKind, Pool
from deployments.models import Deployment, ModelRoute

DEMO_DEPLOYMENTS = [
    {
        "slug": "llama-3-1-8b-h100",
        "name": "Llama 3.1 8B bf16 · H100",
        "model": "Llama-3.1-8B-Instruct",
        "label": "bf16",
        "gpu": "H100 SXM",
        "route": "llama-3.1-8b",
        "description": "Llama 3.1 8B Instruct, general chat",
        # The KV pool holds 54 sequences of 8k tokens on one H100 (catalog estimate), so 48 never preempts.
        "max_model_len": 8192,
        "max_num_seqs": 48,
    },
    {
        "slug": "mistral-7b-l40s",
        "name": "Mistral 7B bf16 · L40S",
        "model": "Mistral-7B-Instruct-v0.3",
        "label": "bf16",
        "gpu": "L40S",
        "route": "mistral-7b",
        "description": "Mistral 7B Instruct v0.3, cheap and fast",
        # 25 sequences of 8k fit the KV pool of one L40S (catalog estimate).
        "max_model_len": 8192,
        "max_num_seqs": 24,
    },
]


def seed_demo(*, users: dict, tenants: dict, seed) -> None:
    """Create the demo deployments and routes the seed has not created before.

    ``seed`` (``governor.demo.Seed``) remembers what it made: a demo deployment an admin deleted
    is not recreated at the next start, one they changed keeps the change; on ``seed.reset`` a
    deleted one is created again.
    """
    for spec in DEMO_DEPLOYMENTS:
        key = f"deployment:{spec['slug']}"
        deployment = Deployment.objects.live().filter(slug=spec["slug"]).first()
        if seed.wants(key):
            if deployment is None:
                version = model_version_by_label(model_name=spec["model"], label=spec["label"])
                deployment, _ = services.deployment_create(
                    actor=seed.actor,
                    name=spec["name"],
                    slug=spec["slug"],
                    model_version=version,
                    engine_kind=EngineKind.SIMULATED,
                    gpu_type=gpu_type_get(name=spec["gpu"]),
                    tensor_parallel_size=1,
                    pool=Pool.ONLINE,
                    num_replicas=1,
                    max_model_len=spec["max_model_len"],
                    max_num_seqs=spec["max_num_seqs"],
                    max_num_batched_tokens=8192,
                )
            seed.created(key)
        route_key = f"route:{spec['route']}"
        if not seed.wants(route_key):
            continue
        route = ModelRoute.objects.filter(public_name=spec["route"]).first()
        if route is None:
            route = services.model_route_save(
                route=ModelRoute(public_name=spec["route"], description=spec["description"]), actor=seed.actor
            )
        if deployment is not None and not route.targets.exists():
            services.route_target_set(route=route, deployment=deployment, weight=100, actor=seed.actor)
        seed.created(route_key)
