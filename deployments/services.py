"""Deployment and routing writes. Views and the API call these; they own validation and transactions.

Every change records its audit event, and the event spine reacts after commit (ADR 0030): a
``deployment.*`` change enqueues a reconcile (so Ray follows the new desired state) and every change
to what the gateway routes republishes the ``routes`` section (``deployments.reactions``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_delete, audit_record, audit_save, snapshot
from catalog.selectors import version_can_deploy, version_can_serve_production
from catalog.services import memory_estimate
from deployments.compiler import effective_kv_cache_dtype, effective_precision
from deployments.constants import DesiredState, EngineKind, EventKind, Pool, ScalingMode, Status
from deployments.models import Deployment, DeploymentEvent, ModelRoute, RouteTarget
from deployments.selectors import routing_table
from engines.memory import GIB, MIN_KV_RESERVE_TOKENS, MemoryEstimate
from snapshot.publish import publish_section

log = logging.getLogger(__name__)

# Fields an admin sets when creating a deployment (the rest is observed state).
CREATE_FIELDS = (
    "name",
    "slug",
    "model_version",
    "engine_kind",
    "task",
    "gpu_type",
    "tensor_parallel_size",
    "pool",
    "served_model_name",
    "scaling_mode",
    "num_replicas",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "upscale_delay_s",
    "downscale_delay_s",
    "look_back_period_s",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "quantization",
    "kv_cache_dtype",
    "extra_engine_args",
    "import_path_override",
    "time_scale",
    "desired_state",
)
SCALE_FIELDS = (
    "scaling_mode",
    "num_replicas",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "upscale_delay_s",
    "downscale_delay_s",
    "look_back_period_s",
)


# --- preflight -----------------------------------------------------------------------------------


@dataclass
class Preflight:
    """Whether a deployment fits its GPUs: errors refuse it, warnings are shown and allowed."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: MemoryEstimate | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def deployment_preflight(*, deployment: Deployment) -> Preflight:
    """Fit the weights plus a minimum KV reserve on the deployment's GPUs; explain with numbers.

    Refuses when ``weights + activation reserve + min(max_model_len, 4096) tokens of KV`` exceed
    ``GPU memory × GPUs × gpu_memory_utilization``; warns when the KV pool holds fewer sequences of
    ``max_model_len`` tokens than ``max_num_seqs`` (vLLM would then queue or preempt under load).
    """
    result = Preflight()
    version = deployment.model_version
    model = version.model
    if deployment.max_model_len and deployment.max_model_len > model.max_context:
        result.errors.append(
            f"max_model_len {deployment.max_model_len:,} exceeds {model.name}'s context of {model.max_context:,} tokens."
        )
    tp = deployment.tensor_parallel_size
    if model.attention_heads % tp or model.kv_heads % tp and tp % model.kv_heads:
        # vLLM shards attention heads over TP ranks; KV heads are replicated when TP > kv_heads.
        result.errors.append(
            f"Tensor parallel size {tp} does not divide {model.name}'s {model.attention_heads} attention heads "
            f"/ {model.kv_heads} KV heads."
        )
    if deployment.engine_kind == EngineKind.VLLM_CPU or deployment.gpu_type is None:
        return result
    precision = effective_precision(deployment)
    context = deployment.max_model_len or model.max_context
    try:
        estimate = memory_estimate(
            model=model,
            gpu_type=deployment.gpu_type,
            precision=precision,
            kv_cache_dtype=effective_kv_cache_dtype(deployment),
            tensor_parallel=tp,
            gpu_memory_utilization=deployment.gpu_memory_utilization,
            context_len=context,
            max_num_batched_tokens=deployment.max_num_batched_tokens,
            max_num_seqs=deployment.max_num_seqs,
        )
    except ValidationError as exc:
        result.errors.extend(exc.messages)
        return result
    result.estimate = estimate
    min_kv_tokens = min(context, MIN_KV_RESERVE_TOKENS)
    min_kv_bytes = min_kv_tokens * estimate.kv_bytes_per_token
    need = estimate.weight_bytes + estimate.activation_reserve_bytes + min_kv_bytes
    if not estimate.fits:
        result.errors.append(
            f"Does not fit: weights {estimate.weight_bytes / GIB:.1f} GiB ({precision}: embeddings "
            f"{estimate.weight_embedding_bytes / GIB:.2f}, layers {estimate.weight_layer_bytes / GIB:.2f}, lm_head "
            f"{estimate.weight_lm_head_bytes / GIB:.2f}) + non-torch, activation peak and CUDA graphs "
            f"{estimate.activation_reserve_bytes / GIB:.1f} GiB + minimum KV reserve {min_kv_tokens:,} tokens × "
            f"{estimate.kv_bytes_per_token / 1024:.0f} KiB = {min_kv_bytes / GIB:.2f} GiB → needs {need / GIB:.1f} GiB, "
            f"but {tp} × {deployment.gpu_type.name} ({estimate.memory_per_gpu_bytes / GIB:.2f} GiB, "
            f"{estimate.memory_source}) × "
            f"gpu_memory_utilization {deployment.gpu_memory_utilization:.2f} = {estimate.usable_bytes / GIB:.1f} GiB usable. "
            f"Use more GPUs per replica, a larger GPU or a quantized version."
        )
    elif estimate.max_concurrent_seqs < deployment.max_num_seqs:
        result.warnings.append(
            f"The KV cache holds {estimate.kv_capacity_tokens:,} tokens = {estimate.max_concurrent_seqs:,} sequences of "
            f"max_model_len {context:,}, fewer than max_num_seqs {deployment.max_num_seqs:,}: long requests will "
            f"queue or be preempted. Lower max_model_len or max_num_seqs, or add GPUs."
        )
    return result


def _require_deployable(version) -> None:
    """Rejected and retired versions never run (the catalog's promotion rule)."""
    ok, why = version_can_deploy(version=version)
    if not ok:
        raise ValidationError({"model_version": why})


def _raise_preflight(preflight: Preflight) -> None:
    if preflight.errors:
        raise ValidationError({"__all__": preflight.errors})


# --- hooks ---------------------------------------------------------------------------------------


def routes_section_publish() -> int:
    """Publish the ``routes`` section of the gateway snapshot; returns the snapshot's new version."""
    client = redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)
    try:
        data = {"generated_at": time.time(), "routes": routing_table()}
        return publish_section(
            client, prefix=getattr(settings, "GATEWAY_KEY_PREFIX", "gw:"), section="routes", data=data
        )
    finally:
        client.close()


def _event(deployment: Deployment, kind: str, actor, message: str = "", before=None, after=None) -> None:
    DeploymentEvent.objects.create(
        deployment=deployment,
        kind=kind,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        message=message,
        before=before or {},
        after=after or {},
    )


def _changed(deployment: Deployment, kind: str, actor, message: str = "", before=None, after=None) -> None:
    _event(deployment, kind, actor, message, before, after)
    audit_record(
        actor=actor,
        action=f"deployment.{kind}",
        target=deployment,
        before=before,
        after=after,
        reason=message,
    )


# --- deployments ---------------------------------------------------------------------------------


@transaction.atomic
def deployment_create(*, actor, **fields) -> tuple[Deployment, Preflight]:
    """Create a deployment after its preflight; returns it with the preflight's warnings."""
    unknown = set(fields) - set(CREATE_FIELDS)
    if unknown:
        raise TypeError(f"unknown deployment fields: {sorted(unknown)}")
    deployment = Deployment(created_by=actor if getattr(actor, "is_authenticated", False) else None, **fields)
    if not deployment.served_model_name and deployment.model_version_id:
        deployment.served_model_name = deployment.model_version.model.name
    deployment.full_clean(validate_constraints=True)
    _require_deployable(deployment.model_version)
    preflight = deployment_preflight(deployment=deployment)
    _raise_preflight(preflight)
    deployment.save()
    _changed(
        deployment,
        EventKind.CREATED,
        actor,
        message="; ".join(preflight.warnings),
        after={
            "model_version": str(deployment.model_version),
            "engine_kind": deployment.engine_kind,
            "gpu_type": str(deployment.gpu_type or ""),
            "tensor_parallel_size": deployment.tensor_parallel_size,
            "replicas": deployment.replicas_summary(),
            "desired_state": deployment.desired_state,
        },
    )
    return deployment, preflight


def _locked(deployment: Deployment) -> Deployment:
    locked = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("model_version__model", "gpu_type")
        .get(pk=deployment.pk)
    )
    if locked.is_deleted:
        raise ValidationError("This deployment was deleted.")
    return locked


@transaction.atomic
def deployment_scale(
    *,
    deployment: Deployment,
    actor,
    scaling_mode: str | None = None,
    num_replicas: int | None = None,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    target_ongoing_requests: int | None = None,
    upscale_delay_s: float | None = None,
    downscale_delay_s: float | None = None,
    look_back_period_s: float | None = None,
    reason: str = "",
) -> Deployment:
    """Change the replica count, or the autoscaling bounds, target and delays (None: unchanged).

    Refuses what Ray Serve would (a minimum above the maximum, a negative delay) with the field's
    message and changes nothing; a change is one ``scaled`` event with every scaling field before
    and after, and the reconciler sends Ray the new ``autoscaling_config``."""
    d = _locked(deployment)
    before = {f: getattr(d, f) for f in SCALE_FIELDS}
    if scaling_mode is not None:  # None: keep the mode (a mitigation adding replicas keeps autoscaling)
        d.scaling_mode = scaling_mode
    for name, value in (
        ("num_replicas", num_replicas),
        ("min_replicas", min_replicas),
        ("max_replicas", max_replicas),
        ("target_ongoing_requests", target_ongoing_requests),
        ("upscale_delay_s", upscale_delay_s),
        ("downscale_delay_s", downscale_delay_s),
        ("look_back_period_s", look_back_period_s),
    ):
        if value is not None:
            setattr(d, name, value)
    d.full_clean()
    after = {f: getattr(d, f) for f in SCALE_FIELDS}
    if after == before:
        return d
    d.save(update_fields=[*SCALE_FIELDS, "updated_at"])
    message = f"replicas {_summary(before)} → {_summary(after)}"
    _changed(d, EventKind.SCALED, actor, message + (f": {reason}" if reason else ""), before, after)
    return d


def _summary(values: dict) -> str:
    if values["scaling_mode"] == ScalingMode.AUTOSCALING:
        target = values["target_ongoing_requests"] or "from measured capacity"
        return (
            f"{values['min_replicas']}–{values['max_replicas']} (target {target}, up after "
            f"{values['upscale_delay_s']:g} s, down after {values['downscale_delay_s']:g} s)"
        )
    return str(values["num_replicas"])


@transaction.atomic
def deployment_stop(*, deployment: Deployment, actor) -> Deployment:
    """Take the deployment off Ray (its row, settings and routes stay)."""
    return _set_desired(deployment, actor, DesiredState.STOPPED, EventKind.STOPPED)


@transaction.atomic
def deployment_start(*, deployment: Deployment, actor) -> Deployment:
    """Put a stopped deployment back on Ray, after the preflight passes again."""
    d = _locked(deployment)
    _require_deployable(d.model_version)
    _raise_preflight(deployment_preflight(deployment=d))
    return _set_desired(d, actor, DesiredState.RUNNING, EventKind.STARTED)


def _set_desired(deployment: Deployment, actor, state: str, kind: str) -> Deployment:
    d = _locked(deployment)
    if d.desired_state == state:
        return d
    before = {"desired_state": d.desired_state}
    d.desired_state = state
    d.save(update_fields=["desired_state", "updated_at"])
    _changed(d, kind, actor, before=before, after={"desired_state": state})
    return d


@transaction.atomic
def deployment_delete(*, deployment: Deployment, actor) -> Deployment:
    """Soft-delete: Ray drops the app at the next reconcile; the row and its events remain."""
    d = _locked(deployment)
    d.deleted_at = timezone.now()
    d.save(update_fields=["deleted_at", "updated_at"])
    d.route_targets.all().delete()
    _changed(d, EventKind.DELETED, actor, before={"desired_state": d.desired_state}, after={"deleted": True})
    return d


# --- routing table -------------------------------------------------------------------------------


@transaction.atomic
def model_route_save(*, route: ModelRoute, actor, allowed_tenants=None, reason: str = "") -> ModelRoute:
    """Create or update a route (public model name) and republish the gateway snapshot.

    ``allowed_tenants`` (tenants or their ids; None leaves them as they are, empty allows every
    tenant) restricts which tenants' keys may use the name; a change is audited.
    """
    stored = ModelRoute.objects.filter(pk=route.pk).first() if route.pk else None
    before = snapshot(stored) if stored is not None else None
    route.full_clean()
    route.save()
    audit_save(actor=actor, instance=route, before=before, reason=reason)
    if allowed_tenants is not None:
        before = sorted(route.allowed_tenants.values_list("pk", flat=True))
        after = sorted({getattr(t, "pk", t) for t in allowed_tenants})
        if before != after:
            route.allowed_tenants.set(after)
            audit_record(
                actor=actor,
                action="model_route.tenants_set",
                target=route,
                before={"allowed_tenants": before},
                after={"allowed_tenants": after},
                reason=reason or ("route restricted to tenants" if after else "route open to every tenant"),
            )
    return route


@transaction.atomic
def model_route_free_set(*, route: ModelRoute, free: bool, reason: str, actor) -> ModelRoute:
    """Mark a route as served at $0 on purpose (or take the mark off), with a reason, audited.

    Without the mark, a tenant with a budget is refused on a route whose model has no price in force
    (ADR 0022): a forgotten price must not become free traffic that no hard cap stops.
    """
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the route is (or is no longer) free."})
    before = route.free_reason
    route.free_reason = reason if free else ""
    route.full_clean()
    route.save(update_fields=["free_reason", "updated_at"])
    audit_record(
        actor=actor,
        action="model_route.free_set" if free else "model_route.free_clear",
        target=route,
        before={"free": bool(before), "free_reason": before},
        after={"free": free, "free_reason": route.free_reason},
        reason=reason,
    )
    return route


@transaction.atomic
def model_route_delete(*, route: ModelRoute, actor, reason: str = "") -> None:
    audit_delete(actor=actor, instance=route, reason=reason)
    route.delete()


def _check_target(deployment: Deployment, weight: int) -> None:
    if deployment.is_deleted:
        raise ValidationError({"deployment": "This deployment was deleted."})
    if weight < 0:
        raise ValidationError({"weight": "Weights are 0 or more."})
    if deployment.rehearsal:
        return  # simulated in a rehearsal: no tenant's traffic reaches it
    _require_deployable(deployment.model_version)
    if weight > 0:
        # Routes carry tenants' production traffic: only approved or serving versions get a share.
        ok, why = version_can_serve_production(version=deployment.model_version)
        if not ok:
            raise ValidationError({"deployment": why})


@transaction.atomic
def route_target_set(
    *, route: ModelRoute, deployment: Deployment, weight: int, actor, reason: str = ""
) -> RouteTarget:
    """Add a deployment to a route, or change its weight (0 keeps it but sends it nothing)."""
    _check_target(deployment, weight)
    stored = RouteTarget.objects.filter(route=route, deployment=deployment).first()
    before = snapshot(stored) if stored is not None else None
    target, _ = RouteTarget.objects.update_or_create(
        route=route, deployment=deployment, defaults={"weight": weight}
    )
    audit_save(actor=actor, instance=target, before=before, reason=reason)
    return target


@transaction.atomic
def route_weights_set(
    *,
    route: ModelRoute,
    weights: dict[Deployment, int],
    actor,
    reason: str = "",
    evidence: dict | None = None,
) -> None:
    """Set several targets' weights at once with one snapshot publish (a rollout's step moves two)."""
    for deployment, weight in weights.items():
        _check_target(deployment, weight)
    before, after = {}, {}
    for deployment, weight in weights.items():
        stored = RouteTarget.objects.filter(route=route, deployment=deployment).first()
        before[deployment.slug] = stored.weight if stored is not None else None
        RouteTarget.objects.update_or_create(route=route, deployment=deployment, defaults={"weight": weight})
        after[deployment.slug] = weight
    if before != after:
        audit_record(
            actor=actor,
            action="route.weights_set",
            target=route,
            before={"weights": before},
            after={"weights": after},
            reason=reason,
            evidence=evidence,
        )


@transaction.atomic
def route_target_delete(*, target: RouteTarget, actor, reason: str = "") -> None:
    audit_delete(actor=actor, instance=target, reason=reason)
    target.delete()


# --- incident rehearsals -------------------------------------------------------------------------


@transaction.atomic
def rehearsal_route_create(
    *, public_name: str, version, gpu_type, deployments: dict[str, dict], actor
) -> tuple[ModelRoute, dict[str, Deployment]]:
    """A route and its deployments for an incident rehearsal (``operations.rehearsals``), marked as
    such: the reconciler never deploys them, the lists never show the deployments, and the gateway's
    snapshot leaves the route out. ``deployments``: {name: {"weight", "pool", "max_num_seqs"}}; a
    weight of None makes the deployment without a route target (a release that joins later)."""
    route = ModelRoute(public_name=public_name, rehearsal=True,
                       description="Incident rehearsal: simulated in virtual time, never served")  # fmt: skip
    route.full_clean()
    route.save()
    audit_save(actor=actor, instance=route, before=None, reason="incident rehearsal")
    made = {}
    for name, spec in deployments.items():
        slug = f"{public_name}-{name}".lower().replace("_", "-")[:48].strip("-")
        d = Deployment.objects.create(
            name=f"{public_name} {name}", slug=slug, model_version=version, gpu_type=gpu_type,
            served_model_name=name, max_model_len=spec.get("max_model_len", 8192),
            max_num_seqs=spec.get("max_num_seqs", 128), pool=spec.get("pool", Pool.ONLINE),
            status=Status.RUNNING, rehearsal=True,
        )  # fmt: skip
        if spec.get("weight") is not None:
            RouteTarget.objects.create(route=route, deployment=d, weight=spec["weight"])
        made[name] = d
    return route, made


# --- fault injection (simulated engines) --------------------------------------------------------


@transaction.atomic
def deployment_faults_set(*, deployment: Deployment, faults: dict, actor, reason: str = "") -> Deployment:
    """Inject faults into a simulated deployment (or clear them with ``{}``); Ray redeploys it.

    ``faults``: ``ttft_extra_ms`` (≥ 0), ``decode_slowdown`` (≥ 1), ``error_rate`` (0–1); see
    ``engines.faults``. Only simulated engines take them: real vLLM is not ours to slow down.
    """
    from engines.faults import FaultError, Faults

    d = _locked(deployment)
    if d.engine_kind != EngineKind.SIMULATED:
        raise ValidationError({"faults": "Only simulated engines accept injected faults."})
    try:
        clean = Faults.from_dict(faults).as_dict()
    except FaultError as exc:
        raise ValidationError({"faults": str(exc)}) from None
    if clean == (d.faults or {}):
        return d
    before = {"faults": d.faults}
    d.faults = clean
    d.save(update_fields=["faults", "updated_at"])
    _changed(
        d,
        EventKind.FAULTS,
        actor,
        ("faults injected" if clean else "faults cleared") + (f": {reason}" if reason else ""),
        before,
        {"faults": clean},
    )
    return d


@transaction.atomic
def deployment_admission_set(
    *, deployment: Deployment, max_inflight: int | None, actor, reason: str = ""
) -> Deployment:
    """Set the requests the gateways may send ``deployment`` at once (None: its measured capacity's)."""
    d = _locked(deployment)
    if max_inflight == d.max_inflight:
        return d
    before = {"max_inflight": d.max_inflight}
    d.max_inflight = max_inflight
    d.full_clean()
    d.save(update_fields=["max_inflight", "updated_at"])
    what = f"at most {max_inflight} in flight" if max_inflight else "in-flight limit from measured capacity"
    _changed(d, EventKind.ADMISSION, actor, what + (f": {reason}" if reason else ""), before,
             {"max_inflight": max_inflight})  # fmt: skip
    return d


@transaction.atomic
def deployment_capacity_record(*, deployment_id: int, inflight: int, run_id: int) -> Deployment | None:
    """A measured capacity benchmark of the deployment found the concurrency at which its SLA held
    (``inflight``, over the replicas running now): per replica, that is its default admission limit
    from now on (``Deployment.admission_limit``; the operator's ``max_inflight`` still wins)."""
    d = Deployment.objects.select_for_update().filter(pk=deployment_id, deleted_at__isnull=True).first()
    if d is None or inflight < 1:
        return d
    replicas = max(d.running_replicas or 0, 1)
    per_replica = max(1, -(-inflight // replicas))
    if (d.capacity_inflight, d.capacity_run_id) == (per_replica, run_id):
        return d
    before = {"capacity_inflight": d.capacity_inflight, "capacity_run_id": d.capacity_run_id}
    d.capacity_inflight, d.capacity_run_id = per_replica, run_id
    d.save(update_fields=["capacity_inflight", "capacity_run_id", "updated_at"])
    _changed(d, EventKind.ADMISSION, None,
             f"measured capacity: {inflight} in flight on {replicas} replica(s), {per_replica} per replica "
             f"(benchmark #{run_id})", before, {"capacity_inflight": per_replica, "capacity_run_id": run_id})  # fmt: skip
    return d
