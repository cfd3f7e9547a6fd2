"""Catalog writes and computations. Views and the API call these; they own validation and transactions."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from audit.services import audit_delete, audit_record, audit_save, fields_of, snapshot
from catalog.constants import (
    GATED_LIFECYCLE,
    LIFECYCLE_TRANSITIONS,
    MIN_OVERRIDE_REASON_CHARS,
    Lifecycle,
)
from catalog.models import GpuType, Model, ModelVersion
from engines.memory import MemoryEstimate, estimate_memory
from governor.access import is_platform_admin

HOURS_PER_YEAR = Decimal("8766")  # 365.25 days
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


def gpu_hourly_cost(gpu_type: GpuType) -> Decimal:
    """$ per GPU-hour: the owned-GPU TCO when its inputs are complete, else the rental price.

    TCO/hour = purchase / (years * 8766) + power_kW * PUE * $/kWh + datacenter_ops_per_month / 730.5
    (docs/domain.md "Capacity and cost": depreciation, power, datacenter and operations, not just a rental price).
    """
    g = gpu_type
    tco_inputs = (g.purchase_price_usd, g.depreciation_years, g.power_kw, g.pue, g.electricity_usd_per_kwh)
    if all(value is not None for value in tco_inputs):
        depreciation = g.purchase_price_usd / (g.depreciation_years * HOURS_PER_YEAR)
        power = g.power_kw * g.pue * g.electricity_usd_per_kwh
        ops = (g.datacenter_ops_usd_per_month or Decimal("0")) / HOURS_PER_MONTH
        return (depreciation + power + ops).quantize(Decimal("0.0001"))
    return g.rental_usd_per_hour


def model_version_memory_estimates(
    *,
    version: ModelVersion,
    gpu_types: list[GpuType],
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8),
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
) -> list[dict]:
    """For each GPU type, the smallest TP size that fits and its estimate, plus every TP tried.

    Returns one row per GPU type: ``{"gpu", "best": MemoryEstimate | None, "shown", "by_tp": [...]}`` where
    ``shown`` is the best fit or, when nothing fits, the largest TP tried (to say by how much it misses).
    """
    spec = version.to_spec()
    rows = []
    for gpu in gpu_types:
        by_tp: list[MemoryEstimate] = [
            estimate_memory(
                model=spec,
                gpu=gpu.to_spec(),
                tensor_parallel=tp,
                gpu_memory_utilization=gpu_memory_utilization,
                context_len=context_len,
            )
            for tp in tensor_parallel_sizes
        ]
        best = next((e for e in by_tp if e.fits), None)
        rows.append({"gpu": gpu, "best": best, "shown": best or by_tp[-1], "by_tp": by_tp})
    return rows


def _before(instance) -> dict | None:
    """The stored row behind ``instance`` as audit data, or None for a new one."""
    if instance.pk is None:
        return None
    stored = type(instance).objects.filter(pk=instance.pk).first()
    return snapshot(stored) if stored is not None else None


@transaction.atomic
def model_version_create(*, actor, **fields) -> ModelVersion:
    """Create a version in ``draft`` (unless a lifecycle is given) and record who made it."""
    version = ModelVersion(created_by=actor if getattr(actor, "pk", None) else None, **fields)
    version.full_clean()
    version.save()
    audit_save(actor=actor, instance=version, before=None)
    return version


@transaction.atomic
def model_version_save(*, instance: ModelVersion, actor, reason: str = "") -> ModelVersion:
    """Create or edit a version's facts. The lifecycle moves only through ``model_version_transition``."""
    before = _before(instance)
    if before is not None and before.get("lifecycle") != instance.lifecycle:
        raise ValidationError({"lifecycle": "Change the lifecycle with a transition, not an edit."})
    if before is None:
        instance.created_by = actor if getattr(actor, "pk", None) else None
    instance.full_clean()
    instance.save()
    audit_save(actor=actor, instance=instance, before=before, reason=reason)
    return instance


@transaction.atomic
def model_version_delete(*, instance: ModelVersion, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)


def model_version_gate_status(*, version: ModelVersion) -> dict:
    """The version's eval-gate status, from the checker named by ``settings.GOVERNOR_PROMOTION_GATE``.

    The catalog owns the lifecycle and the evaluations app owns the gates; evaluations reads the
    catalog, so the catalog names its checker in settings instead of importing it (no import cycle).
    Without a configured checker nothing passes: approval then needs an override.
    """
    path = getattr(settings, "GOVERNOR_PROMOTION_GATE", "")
    if not path:
        return {
            "passed": False,
            "override": version.gates_overridden,
            "gates": [],
            "blocking": ["no eval-gate checker is configured (settings.GOVERNOR_PROMOTION_GATE)"],
        }
    return import_string(path)(version=version)


def _label(lifecycle: str) -> str:
    try:
        return Lifecycle(lifecycle).label
    except ValueError:
        return lifecycle


@transaction.atomic
def model_version_transition(
    *, version: ModelVersion, to: str, actor, reason: str = "", override: bool = False
) -> ModelVersion:
    """Move a version along its lifecycle, enforcing the promotion rule, and audit the move.

    - Only the moves in ``LIFECYCLE_TRANSITIONS`` are allowed.
    - Moving to *approved* needs every required gate of the model's policy passed on the policy's
      GPU type, or ``override=True`` by a platform admin with a written ``reason`` (recorded on the
      version and in the audit trail as ``model_version.gate_override``).
    The row is locked for the check and the update, so two concurrent moves cannot both succeed.
    """
    reason = (reason or "").strip()
    if to not in Lifecycle.values:
        raise ValidationError({"lifecycle": f"Unknown lifecycle state {to!r}."})
    locked = ModelVersion.objects.select_for_update(of=("self",)).select_related("model").get(pk=version.pk)
    if locked.lifecycle != version.lifecycle:
        raise ValidationError({"lifecycle": "The version changed meanwhile; reload and try again."})
    current = locked.lifecycle
    allowed = LIFECYCLE_TRANSITIONS.get(current, set())
    if to not in allowed:
        options = ", ".join(_label(a) for a in sorted(allowed)) or "none (this is a final state)"
        raise ValidationError(
            {
                "lifecycle": f"A {_label(current)} version cannot move to {_label(to)}; allowed moves: {options}."
            }
        )
    gates: dict = {}
    changes: dict = {"lifecycle": to}
    if to == GATED_LIFECYCLE:
        gates = model_version_gate_status(version=locked)
        if not gates["passed"]:
            blocking = "; ".join(gates.get("blocking") or ["required gates have not passed"])
            if not override:
                raise ValidationError(
                    {
                        "lifecycle": f"Cannot approve {locked}: {blocking}. "
                        "A platform admin may override the gates with a written reason."
                    }
                )
            if not is_platform_admin(actor):
                raise ValidationError({"lifecycle": "Only a platform admin may override the eval gates."})
            if len(reason) < MIN_OVERRIDE_REASON_CHARS:
                raise ValidationError(
                    {
                        "reason": f"An override needs a written reason of at least "
                        f"{MIN_OVERRIDE_REASON_CHARS} characters."
                    }
                )
            changes.update(
                gate_override_reason=reason, gate_override_by=actor, gate_override_at=timezone.now()
            )
        elif override:
            override = False  # the gates passed: nothing to override
    elif override:
        raise ValidationError({"lifecycle": "An override applies only to the move to Approved."})
    before = fields_of(locked, [n for n in changes])
    for name, value in changes.items():
        setattr(locked, name, value)
    locked.save(update_fields=[*changes, "updated_at"])
    after = fields_of(locked, [n for n in changes])
    evidence = {"gates": gates} if gates else {}
    audit_record(
        actor=actor,
        action="model_version.transition",
        target=locked,
        before=before,
        after=after,
        reason=reason,
        evidence=evidence,
    )
    if override:
        audit_record(
            actor=actor,
            action="model_version.gate_override",
            target=locked,
            before={"lifecycle": current},
            after={"lifecycle": to},
            reason=reason,
            evidence=evidence,
        )
    version.refresh_from_db()
    return version


@transaction.atomic
def model_version_set_quality_profile(*, version: ModelVersion, profile: dict, actor) -> ModelVersion:
    """Set the simulated quality profile of a version (validated, audited)."""
    before = fields_of(version, ["quality_profile"])
    version.quality_profile = profile or {}
    version.full_clean()
    version.save(update_fields=["quality_profile", "updated_at"])
    audit_record(
        actor=actor,
        action="model_version.set_quality_profile",
        target=version,
        before=before,
        after=fields_of(version, ["quality_profile"]),
    )
    return version


def _audited_save(instance, actor, reason: str):
    before = _before(instance)
    instance.full_clean()
    instance.save()
    audit_save(actor=actor, instance=instance, before=before, reason=reason)
    return instance


def _audited_delete(instance, actor, reason: str) -> None:
    audit_delete(actor=actor, instance=instance, reason=reason)
    instance.delete()


@transaction.atomic
def model_save(*, instance: Model, actor, reason: str = "") -> Model:
    return _audited_save(instance, actor, reason)


@transaction.atomic
def model_delete(*, instance: Model, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)


@transaction.atomic
def gpu_type_save(*, instance: GpuType, actor, reason: str = "") -> GpuType:
    return _audited_save(instance, actor, reason)


@transaction.atomic
def gpu_type_delete(*, instance: GpuType, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)
