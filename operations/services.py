"""SLOs: define them (audited), and evaluate them over the gateway's metered requests.

``slos_evaluate`` runs on the beat (``OPERATIONS_SLO_EVAL_S``). For each active SLO it counts the
route's requests in each alert window (one query per SLO), turns them into burn rates, and moves the
SLO's state: a condition that starts to hold opens a breach and emits ``operations.slo_breached``;
when no condition holds any more the breach closes and ``operations.slo_recovered`` is emitted.
Those signals page the on-call and resolve the page (``operations.reactions``).
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from billing.selectors.usage import usage_sli_counts
from events.services import emit
from operations import burn
from operations.mitigations import (  # noqa: F401 - the app's public services, re-exported
    mitigation_apply,
    mitigation_extend,
    mitigation_reject,
    mitigation_revert,
    mitigations_propose,
    mitigations_review,
    playbook_policy_set,
)
from operations.models import Slo, SloBreach, SloKind, SloState

log = logging.getLogger(__name__)


def _decimal(value, field: str) -> Decimal:
    try:
        return Decimal(str(value).strip())
    except (InvalidOperation, ValueError) as exc:
        raise ValidationError({field: "Enter a number."}) from exc


def _float(value, field: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(str(value).strip())
    except ValueError as exc:
        raise ValidationError({field: "Enter a number."}) from exc


@transaction.atomic
def slo_create(
    *,
    route,
    kind: str,
    target,
    threshold_ms=None,
    tpot_threshold_ms=None,
    period_days: int = 30,
    window_scale: float = 1.0,
    min_requests: int = 10,
    actor,
) -> Slo:
    """A new SLO on ``route``. Bounds are checked with their reasons (a form error, a 400)."""
    if kind not in SloKind.values:
        raise ValidationError({"kind": f"Unknown SLO kind {kind!r}."})
    threshold = _float(threshold_ms, "threshold_ms")
    tpot = _float(tpot_threshold_ms, "tpot_threshold_ms")
    if kind == SloKind.ERRORS:
        threshold = tpot = None
    elif threshold is None:
        raise ValidationError({"threshold_ms": "A latency SLO needs its bound in milliseconds."})
    if kind != SloKind.ATTAINMENT:
        tpot = None
    slo = Slo(
        route=route,
        kind=kind,
        target=_decimal(target, "target"),
        threshold_ms=threshold,
        tpot_threshold_ms=tpot,
        period_days=int(_float(period_days, "period_days") or 0),
        window_scale=_float(window_scale, "window_scale") or 0.0,
        min_requests=int(_float(min_requests, "min_requests") or 0),
    )
    slo.full_clean(exclude=["route"])
    try:
        with transaction.atomic():
            slo.save()
    except IntegrityError as exc:
        raise ValidationError({"kind": "This route has that SLO already."}) from exc
    audit_record(
        actor=actor,
        action="slo.create",
        target=slo,
        after={"route": route.public_name, "objective": slo.objective, "period_days": slo.period_days,
               "window_scale": slo.window_scale},
    )  # fmt: skip
    return slo


@transaction.atomic
def slo_delete(*, slo: Slo, actor) -> None:
    audit_record(actor=actor, action="slo.delete", target=slo, before={"objective": slo.objective})
    slo.delete()


def alert_windows(slo: Slo) -> tuple[burn.AlertWindow, ...]:
    """The workbook's conditions for the SLO's period, every window scaled by ``window_scale``."""
    scale = slo.window_scale
    return tuple(
        burn.AlertWindow(w.name, w.severity, w.long_s * scale, w.short_s * scale, w.burn)
        for w in burn.workbook_windows(period_s=slo.period_days * burn.DAY)
    )


def _bad_valid(slo: Slo, c: dict) -> tuple[int, int]:
    if slo.kind == SloKind.TTFT:
        return c["ttft_valid"] - c["ttft_good"], c["ttft_valid"]
    if slo.kind == SloKind.TPOT:
        return c["tpot_valid"] - c["tpot_good"], c["tpot_valid"]
    if slo.kind == SloKind.ERRORS:
        return c["server_errors"], c["requests"]
    return c["requests"] - c["attained"], c["requests"]


def slo_measure(slo: Slo, *, now: dt.datetime) -> dict:
    """Counts and burn rates of each alert window, and what is left of the period's budget."""
    conditions = alert_windows(slo)
    spans = {}
    for w in conditions:
        spans[f"{w.name}_long"] = (now - dt.timedelta(seconds=w.long_s), now)
        spans[f"{w.name}_short"] = (now - dt.timedelta(seconds=w.short_s), now)
    spans["period"] = (now - dt.timedelta(days=slo.period_days), now)
    counts = usage_sli_counts(
        public_model=slo.route.public_name,
        windows=spans,
        ttft_ms=slo.threshold_ms if slo.kind in (SloKind.TTFT, SloKind.ATTAINMENT) else None,
        tpot_ms=(slo.threshold_ms if slo.kind == SloKind.TPOT else slo.tpot_threshold_ms)
        if slo.kind in (SloKind.TPOT, SloKind.ATTAINMENT)
        else None,
    )
    target = float(slo.target)
    windows, rates = {}, {}
    for w in conditions:
        for side in ("long", "short"):
            bad, valid = _bad_valid(slo, counts[f"{w.name}_{side}"])
            rate = burn.burn_rate(bad=bad, valid=valid, target=target)
            if side == "long" and valid < slo.min_requests:
                rate = None  # too few events for the alert to mean anything
            rates[(w.name, side)] = rate
            windows[f"{w.name}_{side}"] = {
                "seconds": round(w.long_s if side == "long" else w.short_s, 3),
                "bad": bad,
                "valid": valid,
                "burn": None if rate is None else round(rate, 4),
                "threshold": round(w.burn, 4),
            }
    bad, valid = _bad_valid(slo, counts["period"])
    period_rate = burn.burn_rate(bad=bad, valid=valid, target=target)
    return {
        "windows": windows,
        "rates": rates,
        "conditions": conditions,
        "period": {
            "bad": bad,
            "valid": valid,
            "good_ratio": None if not valid else round(1 - bad / valid, 6),
            "budget_remaining": None if period_rate is None else round(1.0 - period_rate, 6),
        },
    }


def slo_evaluate(slo: Slo, *, now: dt.datetime | None = None) -> str:
    """Measure one SLO and move its state; returns the new state."""
    now = now or timezone.now()
    m = slo_measure(slo, now=now)
    holding = burn.firing(m["conditions"], m["rates"])
    has_data = any(r is not None for (_, side), r in m["rates"].items() if side == "long")
    with transaction.atomic():
        locked = Slo.objects.select_for_update().select_related("route").get(pk=slo.pk)
        open_breach = SloBreach.objects.filter(slo=locked, ended_at__isnull=True).first()
        top = holding[0] if holding else None
        peak = max((m["rates"][(w.name, "long")] or 0.0) for w in holding) if holding else 0.0
        evidence = {"windows": m["windows"], "period": m["period"], "objective": locked.objective}
        if open_breach is not None and (top is None or top.severity != open_breach.severity):
            open_breach.ended_at = now
            open_breach.save(update_fields=["ended_at"])
            emit(
                "operations.slo_recovered",
                subject=open_breach,
                payload={"breach": open_breach.pk, "slo": locked.pk, "route": locked.route.public_name},
            )
            open_breach = None
        if top is not None and open_breach is None:
            breach = SloBreach.objects.create(
                slo=locked, severity=top.severity, condition=top.name, started_at=now, peak_burn=peak,
                evidence=evidence,
            )  # fmt: skip
            emit(
                "operations.slo_breached",
                subject=breach,
                payload={
                    "breach": breach.pk,
                    "slo": locked.pk,
                    "route": locked.route.public_name,
                    "objective": locked.objective,
                    "severity": top.severity,
                    "condition": top.name,
                    "burn": round(m["rates"][(top.name, "long")], 3),
                    "threshold": round(top.burn, 3),
                    "long_s": top.long_s,
                    "short_s": top.short_s,
                    "rehearsal": locked.route.rehearsal,
                },
            )
        elif top is not None and open_breach is not None and peak > open_breach.peak_burn:
            open_breach.peak_burn = peak
            open_breach.evidence = evidence
            open_breach.save(update_fields=["peak_burn", "evidence"])
        locked.state = SloState.FIRING if top else (SloState.OK if has_data else SloState.NO_DATA)
        locked.evaluated_at = now
        locked.last = {"windows": m["windows"], "period": m["period"], "firing": [w.name for w in holding]}
        locked.save(update_fields=["state", "evaluated_at", "last"])
    return locked.state


def slos_evaluate(*, now: dt.datetime | None = None) -> dict[int, str]:
    """The beat's pass over every active SLO; one that fails is logged and the others go on.
    A rehearsal's route is left out: its rehearsal evaluates it, in the rehearsal's virtual time."""
    out = {}
    for slo in Slo.objects.filter(is_active=True, route__rehearsal=False).select_related("route"):
        try:
            out[slo.pk] = slo_evaluate(slo, now=now)
        except Exception:  # noqa: BLE001 - one broken SLO must not stop the others; the next pass retries
            log.exception("evaluating SLO %s failed", slo.pk)
            out[slo.pk] = "error"
    return out
