"""Reads of the deployments app, including the routing table the gateway serves.

When each deployment held how many GPUs (its GPU-hours) is read in ``deployments.selectors.gpu_hours``.
"""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from deployments.models import Deployment, DeploymentEvent, ModelRoute, ReconcileRun, RouteTarget


def deployment_list(*, include_deleted: bool = False, status: str | None = None) -> QuerySet[Deployment]:
    """Deployments for the list page and the API, with what they display joined in."""
    qs = Deployment.objects.filter(rehearsal=False).select_related("model_version__model", "gpu_type")
    if not include_deleted:
        qs = qs.live()
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("name", "pk")


def deployment_get(*, pk: int) -> Deployment:
    return Deployment.objects.select_related("model_version__model", "gpu_type", "created_by").get(pk=pk)


def deployment_events(*, deployment: Deployment, limit: int = 100) -> QuerySet[DeploymentEvent]:
    return deployment.events.select_related("actor").order_by("-created_at", "-id")[:limit]


def last_reconcile() -> ReconcileRun | None:
    """The latest finished reconcile (what the console shows as "last synced")."""
    return ReconcileRun.objects.filter(finished_at__isnull=False).order_by("-finished_at", "-id").first()


def route_list() -> QuerySet[ModelRoute]:
    targets = RouteTarget.objects.select_related("deployment__model_version__model").filter(
        deployment__deleted_at__isnull=True
    )
    return ModelRoute.objects.prefetch_related(Prefetch("targets", queryset=targets)).order_by("public_name")


def route_public_names() -> set[str]:
    """Every public model name a route answers to (what a price can be set for)."""
    return set(ModelRoute.objects.values_list("public_name", flat=True))


def routing_table() -> dict:
    """``{public_name: {"long_context_threshold", "tenant_ids", "targets": [...]}}`` for the gateway's
    snapshot (``tenant_ids``: the tenants that may use the name, or None for every tenant).

    Every live target is listed with the status the console may claim now (``display_status``: one
    Ray reported before this platform started reads UNKNOWN until Ray has been heard from again); the
    gateway sends traffic only to RUNNING ones with a positive weight. Stopped, failed and unknown
    deployments stay listed so the gateway can say why a model is unavailable.
    """
    table: dict = {}
    targets = RouteTarget.objects.select_related("deployment__model_version__model").filter(
        deployment__deleted_at__isnull=True
    )
    routes = (
        ModelRoute.objects.filter(rehearsal=False)  # a rehearsal's route exists only in its simulation
        .prefetch_related(Prefetch("targets", queryset=targets), "allowed_tenants")
        .select_related("cache_settings__embedding_route")
        .order_by("public_name")
    )
    for route in routes:
        tenant_ids = sorted(t.pk for t in route.allowed_tenants.all())
        table[route.public_name] = {
            "long_context_threshold": route.long_context_threshold_tokens,
            # Tenants whose keys may use the name; None: every tenant.
            "tenant_ids": tenant_ids or None,
            # Served at $0 on purpose (an admin said why); otherwise a missing price refuses budgets.
            "free": bool(route.free_reason),
            # Whether it takes votes (docs/voting.md): "off", "field" or "n".
            "voting": route.voting,
            # The semantic cache (docs/semantic-cache.md): None unless turned on with an embedding route.
            "cache": _cache_spec(route),
            "targets": [
                {
                    "deployment_id": t.deployment_id,
                    "deployment_slug": t.deployment.slug,
                    "version_id": t.deployment.model_version_id,
                    "base_url": t.deployment.openai_base_url,
                    "engine_model": t.deployment.effective_served_model_name,
                    "weight": t.weight,
                    "pool": t.deployment.pool,
                    "status": t.deployment.display_status,
                    # The budget hold's allowance per image (None: unknown, the gateway's default).
                    "tokens_per_image": t.deployment.model_version.model.max_tokens_per_image,
                    "task": t.deployment.task,
                    # The context the engine was started with (None: the model's own, the engine judges).
                    "max_model_len": t.deployment.max_model_len,
                    # Admission control: the operator's in-flight limit, else the measured capacity's.
                    "max_inflight": t.deployment.admission_limit,
                }
                for t in sorted(route.targets.all(), key=lambda t: t.deployment.slug)
            ],
        }
    return table


def _cache_spec(route: ModelRoute) -> dict | None:
    c = getattr(route, "cache_settings", None)
    if c is None or not c.enabled or c.embedding_route is None:
        return None
    return {
        "ttl_s": c.ttl_s,
        "target_error": c.target_error_rate,
        "verify_share": c.verify_share,
        "embedding_model": c.embedding_route.public_name,
        "generation": c.generation,
    }


def deployment_for_version(*, version_id: int, gpu_type_id: int) -> Deployment | None:
    """A live deployment of a version on a GPU type, running ones first (what eval gates target)."""
    qs = Deployment.objects.live().filter(model_version_id=version_id, gpu_type_id=gpu_type_id)
    qs = qs.select_related("model_version__model", "gpu_type")
    return qs.filter(status="RUNNING").order_by("pk").first() or qs.order_by("pk").first()


def model_has_deployment_on(*, model_id: int, gpu_type_id: int) -> bool:
    """Whether any version of a model has a live deployment on a GPU type."""
    return (
        Deployment.objects.live().filter(model_version__model_id=model_id, gpu_type_id=gpu_type_id).exists()
    )


def deployment_health(*, pk: int) -> dict:
    """``{"status", "deleted", "message"}`` now, for checks that a deployment held up during a run."""
    row = (
        Deployment.objects.filter(pk=pk)
        .values("status", "deleted_at", "status_message", "last_error")
        .first()
    )
    if row is None:
        return {"status": "DELETED", "deleted": True, "message": "the deployment no longer exists"}
    return {
        "status": row["status"],
        "deleted": row["deleted_at"] is not None,
        "message": row["last_error"] or row["status_message"] or "",
    }


def deployment_failures_between(*, pk: int, since, until) -> int:
    """Times the deployment went unhealthy or failed between two instants (engine restarts/crashes)."""
    events = DeploymentEvent.objects.filter(
        deployment_id=pk, created_at__gte=since, created_at__lte=until, kind__in=("status", "error")
    ).values_list("after", flat=True)
    bad = {"UNHEALTHY", "DEPLOY_FAILED"}
    return sum(1 for after in events if (after or {}).get("status") in bad)
