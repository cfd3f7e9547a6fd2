"""Rollout writes: create, the controller's step, admins' actions, and analysis runs.

Every function that changes a rollout locks its row first (``select_for_update``), re-reads the
state and refuses moves the state no longer allows, so two actions at the same moment (an admin's
abort and the controller's promotion, or two controller ticks) cannot both apply. Weight changes
go through ``route_weights_set``, whose audited change republishes the gateway snapshot when the
transaction commits (the event spine, ADR 0030); every transition records an audit event in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from billing.selectors.usage import usage_request_samples
from catalog.constants import Lifecycle
from catalog.promotion import version_promotion
from catalog.selectors import model_version_get
from catalog.services import model_version_transition
from deployments.constants import AnalysisVerdict, RolloutOutcome, RolloutPhase
from deployments.models import AnalysisRun, Deployment, ModelRoute, Rollout, RouteTarget
from deployments.rollouts import analysis as A
from deployments.rollouts.plan import PAUSE, SET_WEIGHT, PlanError, describe_step, validate_plan
from deployments.services import route_weights_set
from events.services import emit

log = logging.getLogger(__name__)

CONTROLLER = "controller"
# Usage events reach Postgres ~0.2–0.5 s after a request (the gateway's spool shipper, ADR 0003):
# the analysis of a window waits this long after the window closes before it reads it.
SHIP_GRACE_S = 1.5
# An analysis task that was enqueued but never ran (worker lost) is enqueued again after this.
ANALYSIS_REENQUEUE_S = 30


def _plan_error(exc: PlanError) -> ValidationError:
    return ValidationError({k: v for k, v in exc.errors.items()})


# --- a canary's admission to production traffic ---------------------------------------------------


def canary_admission_problem(*, deployment: Deployment) -> str | None:
    """Why the canary's version may not take production traffic, or None when it may.

    The promotion rule answers (``catalog.promotion``, which asks the eval gates): an approved or
    serving version whose required gates pass under the model's current policy, or were overridden
    by a platform admin with a reason.
    """
    promotion = version_promotion(version=model_version_get(pk=deployment.model_version_id))
    return None if promotion.may_take_traffic else promotion.traffic_refusal


def _version_transition(*, version_id: int, to: str, reason: str) -> str | None:
    """Move a version's lifecycle as the controller (the catalog audits it); returns why it was refused."""
    version = model_version_get(pk=version_id)
    if version.lifecycle == to:
        return None
    try:
        model_version_transition(version=version, to=to, actor=CONTROLLER, reason=reason)
    except ValidationError as exc:
        return f"{version}: {' '.join(exc.messages)}"
    return None


# --- create ---------------------------------------------------------------------------------------


@transaction.atomic
def rollout_create(
    *,
    route: ModelRoute,
    stable: Deployment,
    canary: Deployment,
    steps: object,
    checks: object,
    failure_limit: object = 0,
    sla_ttft_ms: float = 1000,
    sla_tpot_ms: float = 50,
    template: str = "",
    actor,
) -> Rollout:
    """Validate the plan and the route, add the canary to the route at weight 0, and start.

    Refuses (ValidationError naming the field, nothing changed): a plan that does not reach 100 %
    or is malformed; canary == stable; a deleted deployment; a stable that does not serve the
    route; other deployments with traffic on the route; a canary version not approved/serving; a
    second active rollout on the route.
    """
    try:
        clean_steps, clean_checks, limit = validate_plan(
            steps=steps, checks=checks, failure_limit=failure_limit
        )
    except PlanError as exc:
        raise _plan_error(exc) from None
    # Lock the route so two creations at the same moment see each other.
    route = ModelRoute.objects.select_for_update().get(pk=route.pk)
    if stable.pk == canary.pk:
        raise ValidationError({"canary": "The canary must be a different deployment from the stable one."})
    for field, d in (("stable", stable), ("canary", canary)):
        if d.is_deleted:
            raise ValidationError({field: f"{d} was deleted."})
    if Rollout.objects.active().filter(route=route).exists():
        raise ValidationError({"route": f"{route} already has an active rollout; finish or abort it first."})
    targets = {t.deployment_id: t for t in RouteTarget.objects.filter(route=route)}
    stable_target = targets.get(stable.pk)
    if stable_target is None or stable_target.weight == 0:
        raise ValidationError({"stable": f"{stable} does not serve {route} (no target with weight > 0)."})
    others = [t for d, t in targets.items() if d not in (stable.pk, canary.pk) and t.weight > 0]
    if others:
        names = ", ".join(str(t.deployment) for t in others)
        raise ValidationError(
            {
                "route": f"{route} also sends traffic to {names}; the weights would not add up to stable + canary."
            }
        )
    problem = canary_admission_problem(deployment=canary)
    if problem:
        raise ValidationError({"canary": problem})
    if not isinstance(sla_ttft_ms, int | float) or not isinstance(sla_tpot_ms, int | float):
        raise ValidationError({"sla_ttft_ms": "SLA limits are numbers of milliseconds."})
    if sla_ttft_ms <= 0 or sla_tpot_ms <= 0:
        raise ValidationError({"sla_ttft_ms": "SLA limits must be positive."})
    now = timezone.now()
    rollout = Rollout(
        route=route,
        stable=stable,
        canary=canary,
        template=template,
        steps=clean_steps,
        checks=clean_checks,
        failure_limit=limit,
        sla_ttft_ms=float(sla_ttft_ms),
        sla_tpot_ms=float(sla_tpot_ms),
        step_started_at=now,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    rollout.full_clean()
    rollout.save()
    _set_weights(rollout, 0, actor=actor)
    audit_record(
        actor=actor,
        action="rollout.start",
        target=rollout,
        after={
            "route": route.public_name,
            "stable": stable.slug,
            "canary": canary.slug,
            "steps": clean_steps,
            "checks": clean_checks,
            "failure_limit": limit,
        },
    )  # the event spine advances it right after commit (deployments.reactions.rollout_kick)
    return rollout


# --- helpers -------------------------------------------------------------------------------------


def _lock(rollout_id: int, *, skip_locked: bool = False) -> Rollout | None:
    qs = Rollout.objects.select_for_update(skip_locked=skip_locked, of=("self",)).select_related(
        "route", "stable", "canary"
    )
    return qs.filter(pk=rollout_id).first()


def _set_weights(rollout: Rollout, canary_pct: int, *, actor, reason: str = "") -> None:
    """Canary gets ``canary_pct`` of the route, stable the rest; the gateway follows on commit.

    A deleted deployment has no target any more (deleting removes it from every route): skipped.
    """
    weights = {rollout.canary: canary_pct, rollout.stable: 100 - canary_pct}
    route_weights_set(
        route=rollout.route,
        weights={d: w for d, w in weights.items() if not d.is_deleted},
        actor=actor,
        reason=reason or f"{rollout}: canary at {canary_pct} %",
        evidence={"rollout": rollout.pk},
    )
    rollout.canary_weight = canary_pct


def _save(rollout: Rollout, *fields: str) -> None:
    rollout.save(update_fields=[*fields, "updated_at"])


def _require_active(rollout: Rollout, verb: str, phases: tuple[str, ...]) -> None:
    if not rollout.is_active or rollout.phase not in phases:
        raise ValidationError(
            f"Cannot {verb} this rollout: it is {rollout.get_phase_display()}"
            + (f" ({rollout.get_outcome_display()})" if rollout.outcome else "")
            + "."
        )


# --- the controller ------------------------------------------------------------------------------


def rollout_advance(*, rollout_id: int, now: dt.datetime | None = None) -> str:
    """Run the rollout's steps as far as they can go now; returns what happened (for logs/tests).

    Skips a rollout whose row another transaction holds (that one is acting on it already).
    """
    with transaction.atomic():
        rollout = _lock(rollout_id, skip_locked=True)
        if rollout is None:
            return "busy"
        if not rollout.is_active or rollout.phase != RolloutPhase.PROGRESSING:
            return "idle"
        now = now or timezone.now()
        gone = [d for d in (rollout.stable, rollout.canary) if d.is_deleted]
        if gone:
            _abort(rollout, actor=CONTROLLER, reason=f"{gone[0]} was deleted during the rollout")
            return "aborted"
        for _ in range(len(rollout.steps) + 1):
            step = rollout.current_step
            if step is None:
                _complete(rollout, actor=CONTROLLER, reason="every step passed")
                return "promoted"
            outcome = _run_step(rollout, step, now)
            if outcome != "next":
                return outcome
            rollout.step_index += 1
            rollout.step_started_at = now
            _save(rollout, "step_index", "step_started_at", "canary_weight")
        return "progressing"


def _run_step(rollout: Rollout, step: dict, now: dt.datetime) -> str:
    """``"next"`` when the step is done, otherwise what the rollout waits for."""
    if step["kind"] == SET_WEIGHT:
        before = rollout.canary_weight
        _set_weights(rollout, step["weight"], actor=CONTROLLER)
        audit_record(
            actor=CONTROLLER,
            action="rollout.set_weight",
            target=rollout,
            before={"canary_weight": before},
            after={"canary_weight": step["weight"]},
            reason=f"step {rollout.step_index + 1}: {describe_step(step)}",
        )
        return "next"
    if step["kind"] == PAUSE:
        seconds = step.get("seconds")
        if seconds is None:
            rollout.phase = RolloutPhase.PAUSED
            rollout.message = f"Step {rollout.step_index + 1}: waiting for an admin to resume."
            _save(rollout, "phase", "message")
            audit_record(
                actor=CONTROLLER,
                action="rollout.pause",
                target=rollout,
                before={"phase": RolloutPhase.PROGRESSING},
                after={"phase": RolloutPhase.PAUSED},
                reason=rollout.message,
            )
            return "paused"
        if now >= rollout.step_started_at + dt.timedelta(seconds=seconds):
            return "next"
        return "waiting"
    return _analysis_step(rollout, step, now)


def _analysis_step(rollout: Rollout, step: dict, now: dt.datetime) -> str:
    run = (
        rollout.analysis_runs.filter(step_index=rollout.step_index, window_start__gte=rollout.step_started_at)
        .order_by("-id")
        .first()
    )
    if run is None:
        start = rollout.step_started_at
        run = AnalysisRun.objects.create(
            rollout=rollout,
            step_index=rollout.step_index,
            window_start=start,
            window_end=start + dt.timedelta(seconds=step["window_s"]),
        )
    if run.verdict == AnalysisVerdict.RUNNING:
        due = run.window_end + dt.timedelta(seconds=SHIP_GRACE_S)
        stale = run.enqueued_at and now - run.enqueued_at > dt.timedelta(seconds=ANALYSIS_REENQUEUE_S)
        if now >= due and (run.enqueued_at is None or stale):
            AnalysisRun.objects.filter(pk=run.pk).update(enqueued_at=now)
            emit("deployments.analysis_due", subject=run, payload={"analysis_run": run.pk})
        return "analysing"
    evidence = {"analysis_run": run.pk, "results": run.results}
    if run.verdict == AnalysisVerdict.PASSED:
        audit_record(
            actor=CONTROLLER,
            action="rollout.analysis_passed",
            target=rollout,
            reason=f"step {rollout.step_index + 1}: every check passed",
            evidence=evidence,
        )
        return "next"
    if run.verdict == AnalysisVerdict.FAILED:
        failing = [r for r in run.results if r["status"] == AnalysisVerdict.FAILED]
        reason = "analysis failed: " + "; ".join(_describe_result(r) for r in failing)
        _abort(rollout, actor=CONTROLLER, reason=reason, evidence=evidence)
        return "aborted"
    why = "; ".join(r["why"] for r in run.results if r.get("why"))
    longest = run.window_start + dt.timedelta(seconds=step.get("max_window_s", step["window_s"]))
    if run.verdict == AnalysisVerdict.INCONCLUSIVE and run.window_end < longest:
        # Too few samples (little traffic, or events still shipping): measure again over a longer
        # window from the same start, so everything already seen counts again.
        longer = AnalysisRun.objects.create(
            rollout=rollout,
            step_index=rollout.step_index,
            window_start=run.window_start,
            window_end=min(run.window_end + dt.timedelta(seconds=step["window_s"]), longest),
        )
        rollout.message = (
            f"Step {rollout.step_index + 1}: {why}; measuring again until "
            f"{int((longer.window_end - longer.window_start).total_seconds())} s of traffic."
        )
        _save(rollout, "message")
        audit_record(
            actor=CONTROLLER,
            action="rollout.analysis_extended",
            target=rollout,
            reason=rollout.message,
            evidence={**evidence, "next_analysis_run": longer.pk},
        )
        return "analysing"
    # Still inconclusive at the longest window, or an error reading the data: a human decides.
    rollout.phase = RolloutPhase.PAUSED
    why = why or run.error
    rollout.message = (
        f"Step {rollout.step_index + 1}: analysis {run.verdict} ({why}). Resume to measure again, or abort."
    )
    _save(rollout, "phase", "message")
    audit_record(
        actor=CONTROLLER,
        action="rollout.pause",
        target=rollout,
        before={"phase": RolloutPhase.PROGRESSING},
        after={"phase": RolloutPhase.PAUSED},
        reason=rollout.message,
        evidence=evidence,
    )
    return "paused"


def _describe_result(r: dict) -> str:
    m, fmt = A.METRICS[r["metric"]], A.format_value
    op = "≥" if m.higher_is_better else "≤"
    return (
        f"{r['metric']} ({m.label}): canary {fmt(r['metric'], r['canary'])}, limit {op} "
        f"{fmt(r['metric'], r['threshold'])} (stable {fmt(r['metric'], r['stable'])})"
    )


def _abort(rollout: Rollout, *, actor, reason: str, evidence: dict | None = None) -> None:
    before = {"phase": rollout.phase, "canary_weight": rollout.canary_weight}
    _set_weights(rollout, 0, actor=actor, reason=reason)
    rollout.phase = RolloutPhase.DEGRADED
    rollout.outcome = RolloutOutcome.ABORTED
    rollout.message = reason
    rollout.abort_evidence = evidence or {}
    rollout.aborted_at = rollout.finished_at = timezone.now()
    _save(
        rollout, "phase", "outcome", "message", "abort_evidence", "aborted_at", "finished_at", "canary_weight"
    )
    audit_record(
        actor=actor,
        action="rollout.abort",
        target=rollout,
        before=before,
        after={"phase": rollout.phase, "outcome": rollout.outcome, "canary_weight": 0},
        reason=reason,
        evidence=evidence or {},
    )


def _complete(rollout: Rollout, *, actor, reason: str) -> None:
    before = {
        "phase": rollout.phase,
        "canary_weight": rollout.canary_weight,
        "step_index": rollout.step_index,
    }
    _set_weights(rollout, 100, actor=actor, reason=reason)
    refused = [
        p
        for p in (
            _version_transition(
                version_id=rollout.canary.model_version_id, to=Lifecycle.SERVING, reason=f"{rollout} promoted"
            ),
            (
                _version_transition(
                    version_id=rollout.stable.model_version_id,
                    to=Lifecycle.DEPRECATED,
                    reason=f"replaced by {rollout.canary} ({rollout})",
                )
                if rollout.stable.model_version_id != rollout.canary.model_version_id
                else None
            ),
        )
        if p
    ]
    rollout.phase = RolloutPhase.HEALTHY
    rollout.outcome = RolloutOutcome.PROMOTED
    rollout.step_index = len(rollout.steps)
    rollout.finished_at = timezone.now()
    rollout.message = reason + ("; version changes refused: " + "; ".join(refused) if refused else "")
    _save(rollout, "phase", "outcome", "step_index", "finished_at", "message", "canary_weight")
    audit_record(
        actor=actor,
        action="rollout.promote",
        target=rollout,
        before=before,
        after={"phase": rollout.phase, "outcome": rollout.outcome, "canary_weight": 100},
        reason=rollout.message,
    )


# --- admins' actions ------------------------------------------------------------------------------


@transaction.atomic
def rollout_pause(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    r = _lock(rollout.pk)
    _require_active(r, "pause", (RolloutPhase.PROGRESSING,))
    r.phase = RolloutPhase.PAUSED
    r.message = f"Paused by {actor}" + (f": {reason}" if reason else ".")
    _save(r, "phase", "message")
    audit_record(
        actor=actor,
        action="rollout.pause",
        target=r,
        before={"phase": RolloutPhase.PROGRESSING},
        after={"phase": RolloutPhase.PAUSED},
        reason=reason,
    )
    return r


@transaction.atomic
def rollout_resume(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Continue a paused rollout: past a manual pause step, or measure an analysis step again."""
    r = _lock(rollout.pk)
    _require_active(r, "resume", (RolloutPhase.PAUSED,))
    step = r.current_step
    before = {"phase": r.phase, "step_index": r.step_index}
    if step is not None and step["kind"] == PAUSE and step.get("seconds") is None:
        r.step_index += 1
    r.phase = RolloutPhase.PROGRESSING
    r.step_started_at = timezone.now()
    r.message = ""
    _save(r, "phase", "step_index", "step_started_at", "message")
    audit_record(
        actor=actor,
        action="rollout.resume",
        target=r,
        before=before,
        after={"phase": r.phase, "step_index": r.step_index},
        reason=reason,
    )  # advanced right after commit (deployments.reactions.rollout_kick)
    return r


@transaction.atomic
def rollout_promote(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Skip the remaining steps: canary to 100 % and the versions' lifecycles updated."""
    r = _lock(rollout.pk)
    _require_active(r, "promote", (RolloutPhase.PROGRESSING, RolloutPhase.PAUSED))
    _complete(r, actor=actor, reason=f"promoted by {actor}" + (f": {reason}" if reason else ""))
    return r


@transaction.atomic
def rollout_abort(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    r = _lock(rollout.pk)
    _require_active(r, "abort", (RolloutPhase.PROGRESSING, RolloutPhase.PAUSED))
    _abort(r, actor=actor, reason=f"aborted by {actor}" + (f": {reason}" if reason else ""))
    return r


@transaction.atomic
def rollout_rollback(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """After a promotion: all traffic back to the previous stable, lifecycles restored."""
    r = _lock(rollout.pk)
    if r.outcome != RolloutOutcome.PROMOTED:
        raise ValidationError(
            f"Only a promoted rollout can be rolled back; this one is {r.get_phase_display()}."
        )
    newer = Rollout.objects.filter(route=r.route, created_at__gt=r.created_at).exists()
    if newer:
        raise ValidationError("A later rollout ran on this route; roll that one back instead.")
    for d in (r.stable, r.canary):
        if d.is_deleted:
            raise ValidationError(f"{d} was deleted; nothing to route back to.")
    before = {"phase": r.phase, "outcome": r.outcome, "canary_weight": r.canary_weight}
    # Lifecycles first: the previous stable's version must be serving again before it takes traffic.
    refused = [
        p
        for p in (
            _version_transition(
                version_id=r.stable.model_version_id, to=Lifecycle.SERVING, reason=f"{r} rolled back"
            ),
            (
                _version_transition(
                    version_id=r.canary.model_version_id, to=Lifecycle.DEPRECATED, reason=f"{r} rolled back"
                )
                if r.stable.model_version_id != r.canary.model_version_id
                else None
            ),
        )
        if p
    ]
    _set_weights(r, 0, actor=actor, reason=reason)
    r.phase = RolloutPhase.DEGRADED
    r.outcome = RolloutOutcome.ROLLED_BACK
    r.message = f"rolled back by {actor}" + (f": {reason}" if reason else "")
    if refused:
        r.message += "; version changes refused: " + "; ".join(refused)
    _save(r, "phase", "outcome", "message", "canary_weight")
    audit_record(
        actor=actor,
        action="rollout.rollback",
        target=r,
        before=before,
        after={"phase": r.phase, "outcome": r.outcome, "canary_weight": 0},
        reason=r.message,
    )
    return r


# --- analysis ------------------------------------------------------------------------------------


def analysis_run_execute(*, run_id: int) -> AnalysisRun:
    """Measure both sides over the run's window, store the verdict and numbers, then advance.

    Idempotent: a run that already has a verdict is returned unchanged.
    """
    run = AnalysisRun.objects.select_related("rollout").get(pk=run_id)
    if run.verdict != AnalysisVerdict.RUNNING:
        return run
    rollout = run.rollout
    try:
        samples = usage_request_samples(
            deployment_ids=[rollout.stable_id, rollout.canary_id],
            since=run.window_start,
            until=run.window_end,
        )
        verdict, failed, results, stats = A.analyse(
            checks=rollout.checks,
            failure_limit=rollout.failure_limit,
            stable_samples=[s for s in samples if s["deployment_id"] == rollout.stable_id],
            canary_samples=[s for s in samples if s["deployment_id"] == rollout.canary_id],
            sla_ttft_ms=rollout.sla_ttft_ms,
            sla_tpot_ms=rollout.sla_tpot_ms,
        )
        fields = {
            "verdict": verdict,
            "failed_checks": failed,
            "results": results,
            "error": "",
        }
        for side in ("stable", "canary"):
            for r in results:
                r[f"{side}_requests"] = stats[side]["requests"]
    except Exception as exc:  # noqa: BLE001 - stored on the row; the rollout pauses for a human
        log.exception("analysis run %s failed", run_id)
        fields = {"verdict": AnalysisVerdict.ERROR, "error": f"{type(exc).__name__}: {exc}"}
    fields["finished_at"] = timezone.now()
    with transaction.atomic():
        stored = AnalysisRun.objects.filter(pk=run.pk, verdict=AnalysisVerdict.RUNNING).update(**fields)
        if stored and fields["verdict"] in (AnalysisVerdict.FAILED, AnalysisVerdict.ERROR):
            # An operational signal outside the chain (the abort that follows is audited).
            emit(
                "deployments.analysis_failed",
                subject=run,
                payload={
                    "rollout": rollout.pk,
                    "verdict": fields["verdict"],
                    "failed_checks": fields.get("failed_checks"),
                },
            )
    rollout_advance(rollout_id=rollout.pk)
    run.refresh_from_db()
    return run


def rollouts_tick(*, now: dt.datetime | None = None) -> dict[int, str]:
    """The controller's beat: advance every progressing rollout once."""
    ids = list(Rollout.objects.active().filter(phase=RolloutPhase.PROGRESSING).values_list("pk", flat=True))
    out: dict[int, str] = {}
    for pk in ids:
        try:
            out[pk] = rollout_advance(rollout_id=pk, now=now)
        except Exception:  # noqa: BLE001 - one broken rollout must not stop the others; next tick retries
            log.exception("advancing rollout %s failed", pk)
            out[pk] = "error"
    return out
