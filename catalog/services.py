"""Catalog writes and computations. Views and the API call these; they own validation and transactions."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.services import audit_delete, audit_record, audit_save, snapshot
from catalog.constants import LIFECYCLE_TRANSITIONS, Lifecycle
from catalog.models import GpuType, Model, ModelVersion
from engines.memory import MemoryEstimate, estimate_memory

HOURS_PER_YEAR = Decimal("8766")  # 365.25 days
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


def gpu_hourly_cost(gpu_type: GpuType) -> Decimal:
    """$ per GPU-hour: the owned-GPU TCO when its inputs are complete, else the rental price.

    TCO/hour = purchase / (years * 8766) + power_kW * PUE * $/kWh + datacenter_ops_per_month / 730.5
    (docs/domain.md "Cost": depreciation, power, datacenter and operations, not just a rental price).
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


@transaction.atomic
def model_version_transition(*, version: ModelVersion, to: str, actor, reason: str = "") -> ModelVersion:
    """Move a version along its lifecycle; refuses moves the lifecycle does not allow.

    Uses a conditional UPDATE so two concurrent transitions cannot both succeed.
    """
    allowed = LIFECYCLE_TRANSITIONS.get(version.lifecycle, set())
    if to not in allowed:
        labels = ", ".join(sorted(Lifecycle(a).label for a in allowed)) or "none"
        raise ValidationError(
            {
                "lifecycle": f"Cannot move from {Lifecycle(version.lifecycle).label} to "
                f"{Lifecycle(to).label if to in Lifecycle.values else to}; allowed: {labels}."
            }
        )
    before = version.lifecycle
    updated = ModelVersion.objects.filter(pk=version.pk, lifecycle=before).update(lifecycle=to)
    if updated != 1:
        raise ValidationError({"lifecycle": "The version changed meanwhile; reload and try again."})
    version.refresh_from_db()
    audit_record(
        actor=actor,
        action="model_version.transition",
        target=version,
        before={"lifecycle": before},
        after={"lifecycle": to},
        reason=reason,
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
