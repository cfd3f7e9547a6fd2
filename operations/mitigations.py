"""Playbook actions for incidents: proposed from the diagnosis, applied through the same audited
services a person uses (so the audit trail shows the playbook or the approving on-call as the actor),
time-boxed, and reverted when the route's SLOs held again for the policy's hold time or when the time
box ends, whichever comes first. Only a person can extend a time box.

Modes (``PlaybookPolicy.mode``): ``suggest`` proposes and applies nothing; ``approve`` applies a
proposal when an on-call approves it; ``auto`` applies each proposal at once, within the policy's
limits. ``mitigations_review`` (run after every SLO evaluation) does the reverting.

Reverting restores what the action changed only where the value is still the one the action set:
if a person changed it meanwhile, their value stays and the timeline says so.
"""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record, audit_save, snapshot
from billing.selectors.keys import LIMIT_FIELDS, tenant_get, tenant_limits_of
from billing.services.keys import tenant_limits_set
from deployments.constants import Pool
from deployments.rollouts.selectors import rollout_get, rollout_list
from deployments.rollouts.services import rollout_pause, rollout_resume
from deployments.services import deployment_scale, model_route_save, route_weights_set
from notify.services import notify_oncall
from operations import playbooks
from operations.models import (
    Incident,
    IncidentEntry,
    Mitigation,
    PlaybookMode,
    PlaybookPolicy,
    Slo,
    SloBreach,
    SloState,
)
from operations.timeline import entry_add

ACTOR = "playbook"  # the audit trail's actor for actions applied in automatic mode
POLICY_FIELDS = ("mode", "actions", "time_box_minutes", "hold_minutes", "min_rpm", "min_input_tokens",
                 "min_output_tokens", "max_extra_replicas")  # fmt: skip


def _name(actor) -> str:
    return actor if isinstance(actor, str) else actor.get_username()


def _entry(m: Mitigation, text: str, at: dt.datetime, source: str) -> None:
    entry_add(incident_id=m.incident_id, kind=IncidentEntry.Kind.ACTION, text=text, at=at,
              data={"mitigation": m.pk, "kind": m.kind}, source=source)  # fmt: skip


# --- the policy ------------------------------------------------------------------------------------


def policy_for(route) -> PlaybookPolicy:
    """The route's policy, or the default (suggest only) when none was set."""
    return PlaybookPolicy.objects.filter(route=route).first() or PlaybookPolicy(route=route)


def route_context(route) -> int | None:
    """The smallest context among the route's deployments: a token cap above it caps nothing."""
    lens = [t.deployment.max_model_len or t.deployment.model_version.model.max_context
            for t in route.targets.select_related("deployment__model_version__model")]  # fmt: skip
    return min(lens) if lens else None


def _int(value, field: str) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise ValidationError({field: "Enter a whole number."}) from None


@transaction.atomic
def playbook_policy_set(*, route, actor, **fields) -> PlaybookPolicy:
    """Set how far the route's playbook may act on its own (audited). Refuses limits that make no
    sense: a rate-limit floor of 0 (it would let a playbook stop every tenant), a token cap floor
    above the route's context, an unknown action."""
    unknown = set(fields) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown playbook settings: {', '.join(sorted(unknown))}.")
    stored = PlaybookPolicy.objects.select_for_update().filter(route=route).first()
    before = snapshot(stored) if stored is not None else None
    policy = stored or PlaybookPolicy(route=route)
    if "mode" in fields:
        if fields["mode"] not in PlaybookMode.values:
            raise ValidationError({"mode": f"Choose one of: {', '.join(PlaybookMode.values)}."})
        policy.mode = fields["mode"]
    if "actions" in fields:
        actions = [a for a in (fields["actions"] or []) if a]
        bad = [a for a in actions if a not in playbooks.ACTIONS]
        if bad:
            raise ValidationError({"actions": f"Unknown action: {', '.join(map(str, bad))}."})
        policy.actions = sorted(set(actions))
    for field in POLICY_FIELDS[2:]:
        if field in fields:
            setattr(policy, field, _int(fields[field], field))
    if policy.min_rpm < 1:
        raise ValidationError({"min_rpm": "A rate limit below 1 request a minute stops the tenant: the floor "
                               "must be at least 1."})  # fmt: skip
    context = route_context(route)
    for field in ("min_input_tokens", "min_output_tokens"):
        if context and getattr(policy, field) > context:
            raise ValidationError({field: f"A cap of {getattr(policy, field)} tokens is above the route's context "
                                   f"({context} tokens): it would cap nothing."})  # fmt: skip
    policy.full_clean()
    policy.save()
    audit_save(actor=actor, instance=policy, before=before, reason="playbook policy")
    return policy


# --- proposing -------------------------------------------------------------------------------------


def route_state(route, policy: PlaybookPolicy, diagnosis: dict) -> dict:
    """What ``playbooks.plan`` needs to know about the route, as plain data."""
    targets = {}
    for t in route.targets.select_related("deployment__model_version__model"):
        d = t.deployment
        if d.is_deleted:
            continue
        targets[d.slug] = {"weight": t.weight, "num_replicas": d.num_replicas, "scaling_mode": d.scaling_mode,
                           "max_model_len": d.max_model_len or d.model_version.model.max_context, "pool": d.pool,
                           "parameters": d.model_version.model.parameter_count}  # fmt: skip
    rollout = rollout_list(route=route).filter(phase="progressing").first()
    return {
        "targets": targets,
        "route": {"long_context_threshold": route.long_context_threshold_tokens},
        "rollout": {"id": rollout.pk, "phase": rollout.phase} if rollout else None,
        "limits": tenant_limits_of(tenant_ids=(diagnosis.get("tenants") or {}).keys()),
        "policy": {f: getattr(policy, f) for f in POLICY_FIELDS[1:]},
    }


def _acts_on(kind: str, params: dict) -> tuple:
    """What an action changes: a deployment's weight or replicas, a tenant's limit, a rollout, or (none of
    those) the route's long-context threshold."""
    thing = params.get("deployment") or params.get("rollout_id") or params.get("tenant_id")
    return kind, thing


def mitigations_propose(*, incident: Incident, now: dt.datetime | None = None) -> list[Mitigation]:
    """Turn the incident's diagnosis into proposals; apply them at once in automatic mode, or page the
    on-call for an approval. Idempotent: a proposal exists once per incident and action."""
    now = now or timezone.now()
    policy = policy_for(incident.route)
    proposals = playbooks.plan(
        incident.diagnosis or {}, route_state(incident.route, policy, incident.diagnosis or {})
    )
    made = []
    # One action per thing acted on: a later diagnosis of the same incident (an escalation) does not
    # add a second replica to a deployment already scaled, or tighten a cap already set.
    acting = {_acts_on(m.kind, m.params) for m in incident.mitigations.filter(state=Mitigation.State.APPLIED)}
    for a in proposals:
        if _acts_on(a["kind"], a["params"]) in acting:
            continue
        m, created = Mitigation.objects.get_or_create(
            incident=incident, kind=a["kind"], params=a["params"],
            defaults={"summary": a["summary"][:300], "why": a["why"][:300], "mode": policy.mode, "proposed_at": now},
        )  # fmt: skip
        if created:
            _entry(m, f"Proposed ({policy.get_mode_display().lower()}): {m.summary}", now, f"proposed:{m.pk}")
        made.append(m)
    pending = [m for m in made if m.state == Mitigation.State.PROPOSED]
    if policy.mode == PlaybookMode.AUTO:
        for m in pending:
            mitigation_apply(mitigation=m, actor=ACTOR, now=now)
    elif policy.mode == PlaybookMode.APPROVE and pending and not incident.route.rehearsal:
        notify_oncall(
            kind="operations.mitigation_proposed",
            title=f"{incident.route.public_name}: {len(pending)} playbook action(s) wait for an approval",
            body="\n".join(f"- {m.summary} ({m.why})" for m in pending),
            payload={"event": "operations.mitigation_proposed", "incident": incident.pk,
                     "route": incident.route.public_name, "labels": {"route": incident.route.public_name}},
            dedup_key=f"mitigations:{incident.pk}",
        )  # fmt: skip
    return made


# --- applying and undoing, one function per kind of action ------------------------------------------


def _target(route, slug: str):
    t = route.targets.select_related("deployment").filter(deployment__slug=slug).first()
    if t is None or t.deployment.is_deleted:
        raise ValidationError(f"{slug} does not serve {route.public_name}: a playbook acts only on the route it "
                              "covers.")  # fmt: skip
    return t


def _tenant(pk):
    tenant = tenant_get(pk=int(pk))
    if tenant is None:
        raise ValidationError(f"Tenant {pk} no longer exists.")
    return tenant


def _limits_with(tenant, field: str, value: int, actor, reason: str) -> dict:
    current = tenant_limits_of(tenant_ids=[tenant.pk])[str(tenant.pk)]
    tenant_limits_set(tenant=tenant, actor=actor, reason=reason, **{**current, field: value})
    return {field: current[field]}


def _execute(m: Mitigation, route, actor, reason: str, policy: PlaybookPolicy) -> dict:
    """Apply ``m`` through the services; return what undoing needs."""
    p = m.params
    if m.kind == "shift_weight":
        t = _target(route, p["deployment"])
        others = sum(o.weight for o in route.targets.exclude(pk=t.pk))
        if int(p["weight"]) < 0 or (int(p["weight"]) == 0 and others <= 0):
            raise ValidationError("The route's other deployments carry no weight: draining this one would "
                                  "leave the route with none.")  # fmt: skip
        route_weights_set(route=route, weights={t.deployment: int(p["weight"])}, actor=actor, reason=reason)
        return {"weight": t.weight}
    if m.kind == "isolate_long_prompts":
        value = int(p["threshold"])
        pool = [t.deployment for t in route.targets.select_related("deployment__model_version__model")
                if t.deployment.pool == Pool.LONG_CONTEXT and t.weight > 0 and not t.deployment.is_deleted]  # fmt: skip
        if not pool:
            raise ValidationError(f"{route.public_name} has no long-context deployment with weight: there is "
                                  "nowhere to send long prompts.")  # fmt: skip
        context = min(d.max_model_len or d.model_version.model.max_context for d in pool)
        if not 1 <= value < context:
            raise ValidationError(f"A long-context threshold of {value} tokens must be between 1 and the pool's "
                                  f"context ({context}).")  # fmt: skip
        before = route.long_context_threshold_tokens
        route.long_context_threshold_tokens = value
        model_route_save(route=route, actor=actor, reason=reason)
        return {"threshold": before}
    if m.kind == "add_replicas":
        d = _target(route, p["deployment"]).deployment
        if int(p["num_replicas"]) - d.num_replicas > policy.max_extra_replicas:
            raise ValidationError(f"Adding {int(p['num_replicas']) - d.num_replicas} replicas is above the "
                                  f"policy's limit of {policy.max_extra_replicas}.")  # fmt: skip
        before = d.num_replicas
        deployment_scale(deployment=d, actor=actor, num_replicas=int(p["num_replicas"]))
        return {"num_replicas": before}
    if m.kind == "pause_rollout":
        rollout = rollout_get(pk=int(p["rollout_id"]))
        if rollout.route_id != route.pk:
            raise ValidationError(f"Rollout #{rollout.pk} is not on {route.public_name}: a playbook acts only on "
                                  "the route it covers.")  # fmt: skip
        rollout_pause(rollout=rollout, actor=actor, reason=reason)
        return {"phase": "progressing"}
    fields = {"rate_limit": ("rpm_limit", policy.min_rpm), "cap_input_tokens": ("max_input_tokens", policy.min_input_tokens),
              "cap_output_tokens": ("max_output_tokens", policy.min_output_tokens)}  # fmt: skip
    if m.kind in fields:
        field, floor = fields[m.kind]
        value = int(p[field])
        if value < floor:
            raise ValidationError(f"{field} {value} is below the policy's floor of {floor}.")
        context = route_context(route)
        if field != "rpm_limit" and context and value > context:
            raise ValidationError(f"A cap of {value} tokens is above the route's context ({context}).")
        return _limits_with(_tenant(p["tenant_id"]), field, value, actor, reason)
    raise ValidationError(f"Unknown action {m.kind}.")


def _undo(m: Mitigation, route, actor, reason: str) -> str:
    """Put back what ``m`` changed, where it is still what ``m`` set. Returns what happened."""
    p, u = m.params, m.undo
    if m.kind == "shift_weight":
        t = route.targets.select_related("deployment").filter(deployment__slug=p["deployment"]).first()
        if t is None or t.weight != int(p["weight"]):
            return "left as it is: the weight was changed since"
        route_weights_set(route=route, weights={t.deployment: int(u["weight"])}, actor=actor, reason=reason)
        return f"{p['deployment']}'s weight back to {u['weight']}"
    if m.kind == "isolate_long_prompts":
        route.refresh_from_db(fields=["long_context_threshold_tokens"])
        if route.long_context_threshold_tokens != int(p["threshold"]):
            return "left as it is: the route's long-context threshold was changed since"
        route.long_context_threshold_tokens = u["threshold"]
        model_route_save(route=route, actor=actor, reason=reason)
        return f"the route's long-context threshold back to {u['threshold'] or 'none'}"
    if m.kind == "add_replicas":
        t = route.targets.select_related("deployment").filter(deployment__slug=p["deployment"]).first()
        if t is None or t.deployment.num_replicas != int(p["num_replicas"]):
            return "left as it is: the replica count was changed since"
        deployment_scale(deployment=t.deployment, actor=actor, num_replicas=int(u["num_replicas"]))
        return f"{p['deployment']} back to {u['num_replicas']} replicas"
    if m.kind == "pause_rollout":
        rollout = rollout_get(pk=int(p["rollout_id"]))
        if rollout.phase != "paused":
            return "left as it is: the rollout was resumed, promoted or aborted since"
        rollout_resume(rollout=rollout, actor=actor, reason=reason)
        return f"rollout #{rollout.pk} resumed: its analysis measures the canary again"
    field = next(f for f in LIMIT_FIELDS if f in p)
    tenant = tenant_get(pk=int(p["tenant_id"]))
    if tenant is None:
        return "nothing to undo: the tenant was deleted"
    current = tenant_limits_of(tenant_ids=[tenant.pk])[str(tenant.pk)]
    if current[field] != int(p[field]):
        return f"left as it is: the tenant's {field} was changed since"
    _limits_with(tenant, field, int(u[field]), actor, reason)
    return f"tenant {tenant}'s {field} back to {u[field] or 'none'}"


def _locked(m: Mitigation) -> Mitigation:
    return Mitigation.objects.select_for_update().select_related("incident__route").get(pk=m.pk)


def mitigation_apply(*, mitigation: Mitigation, actor, now: dt.datetime | None = None) -> Mitigation:
    """Apply a proposal (a person approving it, or the playbook in automatic mode)."""
    now = now or timezone.now()
    with transaction.atomic():
        m = _locked(mitigation)
        if m.state != Mitigation.State.PROPOSED:
            raise ValidationError(
                f"This action is {m.get_state_display().lower()}, not waiting to be applied."
            )
        route = m.incident.route
        policy = policy_for(route)
        if not isinstance(actor, str) and policy.mode == PlaybookMode.SUGGEST:
            raise ValidationError(f"{route.public_name}'s playbook only suggests: set it to apply after an "
                                  "approval to apply actions from here.")  # fmt: skip
        reason = f"incident #{m.incident_id}: {m.why}"[:500]
        try:
            with transaction.atomic():
                m.undo = _execute(m, route, actor, reason, policy)
        except ValidationError as exc:
            m.state, m.outcome, m.ended_at = Mitigation.State.FAILED, " ".join(exc.messages)[:500], now
            m.save(update_fields=["state", "outcome", "ended_at"])
            _entry(m, f"Could not apply: {m.summary}: {m.outcome}", now, f"failed:{m.pk}")
            return m
        m.state, m.applied_at, m.applied_by = Mitigation.State.APPLIED, now, _name(actor)
        m.expires_at = now + dt.timedelta(minutes=policy.time_box_minutes)
        m.save(update_fields=["undo", "state", "applied_at", "applied_by", "expires_at"])
        _entry(m, f"Applied by {m.applied_by}: {m.summary}; undone when the SLOs hold {policy.hold_minutes} min, "
               f"or at {m.expires_at:%H:%M:%S} UTC at the latest", now, f"applied:{m.pk}")  # fmt: skip
    return m


def mitigation_reject(*, mitigation: Mitigation, actor, now: dt.datetime | None = None) -> Mitigation:
    now = now or timezone.now()
    with transaction.atomic():
        m = _locked(mitigation)
        if m.state != Mitigation.State.PROPOSED:
            raise ValidationError(
                f"This action is {m.get_state_display().lower()}: only a proposal can be rejected."
            )
        m.state, m.ended_at, m.ended_by = Mitigation.State.REJECTED, now, _name(actor)
        m.save(update_fields=["state", "ended_at", "ended_by"])
        audit_record(actor=actor, action="mitigation.reject", target=m, after={"state": m.state},
                     reason=f"incident #{m.incident_id}")  # fmt: skip
        _entry(m, f"Rejected by {m.ended_by}: {m.summary}", now, f"rejected:{m.pk}")
    return m


def mitigation_extend(*, mitigation: Mitigation, actor, now: dt.datetime | None = None) -> Mitigation:
    """A person keeps an applied action for one more time box (the playbook never extends its own)."""
    now = now or timezone.now()
    if isinstance(actor, str):
        raise ValidationError("Only a person can extend an action's time box.")
    with transaction.atomic():
        m = _locked(mitigation)
        if m.state != Mitigation.State.APPLIED:
            raise ValidationError(
                f"This action is {m.get_state_display().lower()}: only an applied one can be extended."
            )
        before = m.expires_at
        m.expires_at = max(m.expires_at or now, now) + dt.timedelta(
            minutes=policy_for(m.incident.route).time_box_minutes
        )
        m.extended_by = _name(actor)
        m.save(update_fields=["expires_at", "extended_by"])
        audit_record(actor=actor, action="mitigation.extend", target=m, before={"expires_at": before},
                     after={"expires_at": m.expires_at}, reason=f"incident #{m.incident_id}")  # fmt: skip
        _entry(m, f"Extended by {m.extended_by} to {m.expires_at:%H:%M:%S} UTC: {m.summary}", now,
               f"extended:{m.pk}:{m.expires_at.isoformat()}")  # fmt: skip
    return m


def mitigation_revert(
    *, mitigation: Mitigation, actor, reason: str, now: dt.datetime | None = None
) -> Mitigation:
    now = now or timezone.now()
    with transaction.atomic():
        m = _locked(mitigation)
        if m.state != Mitigation.State.APPLIED:
            return m  # reverted already (the review and a person at once)
        outcome = _undo(m, m.incident.route, actor, f"incident #{m.incident_id}: {reason}"[:500])
        m.state, m.ended_at, m.ended_by = Mitigation.State.REVERTED, now, _name(actor)
        m.outcome = f"{reason}: {outcome}"[:500]
        m.save(update_fields=["state", "ended_at", "ended_by", "outcome"])
        _entry(m, f"Reverted ({m.outcome}): {m.summary}", now, f"reverted:{m.pk}")
    return m


def _held(route, *, since: dt.datetime) -> bool:
    """Every active SLO of the route is OK and none breached after ``since``."""
    slos = Slo.objects.filter(route=route, is_active=True)
    if not slos.exists() or slos.exclude(state=SloState.OK).exists():
        return False
    recent = SloBreach.objects.filter(slo__route=route).filter(ended_at__isnull=True)
    return not recent.exists() and not SloBreach.objects.filter(slo__route=route, ended_at__gt=since).exists()


def mitigations_review(*, now: dt.datetime | None = None, route=None) -> dict[int, str]:
    """Revert each applied action whose time box ended, or whose route's SLOs held for the hold time.

    Without ``route``: every route but rehearsals' (the beat's pass, in real time); with it: that
    route's actions only (a rehearsal's pass, in its virtual time)."""
    now = now or timezone.now()
    done = {}
    applied = Mitigation.objects.filter(state=Mitigation.State.APPLIED).select_related("incident__route")
    applied = (
        applied.filter(incident__route=route)
        if route is not None
        else applied.filter(incident__route__rehearsal=False)
    )
    for m in applied:
        policy = policy_for(m.incident.route)
        hold = dt.timedelta(minutes=policy.hold_minutes)
        if m.expires_at and now >= m.expires_at:
            done[m.pk] = mitigation_revert(
                mitigation=m, actor=ACTOR, reason="its time box ended", now=now
            ).state
        elif m.applied_at and now - m.applied_at >= hold and _held(m.incident.route, since=now - hold):
            done[m.pk] = mitigation_revert(
                mitigation=m, actor=ACTOR, reason=f"the SLOs held for {policy.hold_minutes} min", now=now
            ).state
    return done
