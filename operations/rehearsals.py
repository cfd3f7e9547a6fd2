"""Rehearsals: one of the eight incident causes produced on purpose on a route's simulated
deployments, in virtual time, with everything downstream running for real.

Each tick (``engines.rehearsal``) simulates the route's traffic on its deployments under the
platform's current controls (route weights, replicas, tenants' rate limits and token caps, read back
from the database every tick), writes what the gateway would have metered
(``billing.services.rehearsal``) and what each engine's ``/metrics`` said (parsed by the same parser
the scraper uses), then evaluates the route's SLOs at the tick's end and reviews the playbook's
actions. The breach, its page, the incident, the diagnosis and the playbook's actions are the
platform's own, through the event spine's reactions; the incident is labelled a rehearsal.

Virtual time: the rehearsal's clock starts at ``start`` and moves by the tick, so that a 20-minute
rehearsal takes seconds. Not simulated here: the gateway process itself (its admission decisions are
modelled in ``engines.rehearsal`` from the same limits it would read) and Ray Serve.

An admin starts one from the console (``rehearsal_start``; a worker runs ``rehearsal_execute``): it
gets its own route, deployments and tenants, marked or named as a rehearsal's, so that nothing is
deployed, served, billed or paged for it, and its virtual clock ends at the moment it was run, so its
incident sits in the console's timeline where it happened.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from billing.selectors.keys import tenant_limits_of
from billing.services.rehearsal import usage_rehearsal_record
from billing.services.tenancy import tenant_create
from catalog.services import rehearsal_catalog
from core.lifecycle import run_claim, run_fail, run_finish, run_report
from deployments.constants import Pool
from deployments.services import rehearsal_route_create, route_weights_set
from engines.rehearsal import SCENARIOS, Controls, Rehearsal, Scenario, metrics_text, scenario
from events.services import emit
from operations import engine_metrics
from operations.mitigations import mitigation_revert, mitigations_review, playbook_policy_set
from operations.models import (
    EngineSample,
    Incident,
    IncidentEntry,
    Mitigation,
    RehearsalRun,
    Slo,
    SloBreach,
    SloState,
)
from operations.services import slo_create, slo_evaluate
from operations.timeline import entry_add

ACTOR = "rehearsal"
# The SRE workbook's windows scaled down (the 1 h / 5 min page windows become 36 s / 3 s), so that
# a fault is detected within a rehearsal's minutes of virtual time.
WINDOW_SCALE = 0.01
# A console rehearsal's virtual seconds: (steady traffic before the fault, the fault, after it). The
# baseline the diagnosis compares with needs the steady minutes; "full" leaves the playbook time to
# act while the fault lasts, and the SLOs time to hold again after it.
LENGTHS = {"quick": (240, 60, 60), "full": (300, 240, 360)}


def rehearsal_setup(
    name: str, sc: Scenario, *, actor, mode: str = "auto", window_scale: float = WINDOW_SCALE
):
    """A route named ``name`` for scenario ``sc``: its simulated deployments (marked as a
    rehearsal's), its tenants, three SLOs (TTFT 500 ms, TPOT 40 ms, errors; 99 %) and a playbook in
    ``mode`` (10-minute time box, 1-minute hold). Returns (route, {deployment: row}, {tenant: row})."""
    version, gpu = rehearsal_catalog(actor=actor)
    specs = {d: {"weight": 50, "max_num_seqs": sc.max_num_seqs} for d in sc.deployments}
    specs |= {
        d: {"weight": 50, "max_num_seqs": sc.max_num_seqs, "pool": Pool.LONG_CONTEXT} for d in sc.long_pool
    }
    if sc.fault.joins:
        specs[sc.fault.joins] = {"weight": None, "max_num_seqs": sc.max_num_seqs}
    route, deployments = rehearsal_route_create(public_name=name, version=version, gpu_type=gpu,
                                                deployments=specs, actor=actor)  # fmt: skip
    tenants = {}
    for t in (*sc.tenants, *sc.fault.tenants):
        if t.name not in tenants:
            tenants[t.name] = tenant_create(name=f"{name} {t.name}", slug=f"{name}-{t.name}"[:50].replace("_", "-"),
                                            actor=actor)  # fmt: skip
    for kind, threshold in (("ttft", 500), ("tpot", 40), ("errors", None)):
        slo_create(route=route, kind=kind, threshold_ms=threshold, target="0.99", window_scale=window_scale,
                   min_requests=10, actor=actor)  # fmt: skip
    playbook_policy_set(route=route, actor=actor, mode=mode, time_box_minutes=10, hold_minutes=1)
    return route, deployments, tenants


# --- from the console -----------------------------------------------------------------------------


def rehearsal_start(*, scenario_name: str, mode: str, actor, length: str = "full") -> RehearsalRun:
    """Queue a rehearsal of one of the eight causes (``engines.rehearsal.SCENARIOS``) of a length in
    ``LENGTHS``; a worker runs it."""
    if scenario_name not in SCENARIOS:
        raise ValidationError({"scenario": f"Choose one of: {', '.join(SCENARIOS)}."})
    if mode not in RehearsalRun.Mode.values:
        raise ValidationError({"mode": f"Choose one of: {', '.join(RehearsalRun.Mode.values)}."})
    if length not in LENGTHS:
        raise ValidationError({"length": f"Choose one of: {', '.join(LENGTHS)}."})
    steady, fault, after = LENGTHS[length]
    with transaction.atomic():
        run = RehearsalRun.objects.create(
            scenario=scenario_name, mode=mode, fault_at_s=steady, fault_for_s=fault, virtual_s=steady + fault + after,
            created_by=actor if getattr(actor, "pk", None) else None,
        )  # fmt: skip
        emit("operations.rehearsal_queued", subject=run, payload={"run": run.pk})
    return run


def _enqueue(run_id: int) -> None:
    from operations.tasks import rehearsal_execute_task

    rehearsal_execute_task.delay(run_id)


def _close(route, *, at: dt.datetime) -> None:
    """The rehearsal ended: nothing it set stays applied, nothing it opened stays open, and its SLOs
    stop (the beat never evaluates them; left active, they would read as burning for ever)."""
    for m in Mitigation.objects.filter(incident__route=route, state=Mitigation.State.APPLIED):
        mitigation_revert(mitigation=m, actor=ACTOR, reason="the rehearsal ended", now=at)
    with transaction.atomic():
        SloBreach.objects.filter(slo__route=route, ended_at__isnull=True).update(ended_at=at)
        Slo.objects.filter(route=route).update(is_active=False)
        for incident in Incident.objects.select_for_update().filter(route=route, status=Incident.Status.OPEN):
            incident.status, incident.resolved_at = Incident.Status.RESOLVED, at
            incident.save(update_fields=["status", "resolved_at"])
            entry_add(incident_id=incident.pk, kind=IncidentEntry.Kind.RESOLVED, at=at, source="rehearsal-ended",
                      text="The rehearsal ended (its fault and its traffic with it)")  # fmt: skip


def rehearsal_execute(*, run_id: int) -> RehearsalRun:
    """Run a queued console rehearsal to its end (a no-op when it is not queued any more). Its
    virtual clock ends now; whatever the playbook still has applied at the end is reverted."""
    if not run_claim(RehearsalRun, pk=run_id):
        return RehearsalRun.objects.get(pk=run_id)
    run = RehearsalRun.objects.select_related("created_by").get(pk=run_id)
    actor = run.created_by or "system:rehearsal"
    try:
        sc = scenario(run.scenario, fault_at_s=float(run.fault_at_s), fault_for_s=float(run.fault_for_s))
        route, deps, tenants = rehearsal_setup(f"rehearsal-{run.pk}-{run.scenario.replace('_', '-')}", sc,
                                               actor=actor, mode=run.mode)  # fmt: skip
        RehearsalRun.objects.filter(pk=run.pk).update(route=route)
        end = timezone.now()
        start = end - dt.timedelta(seconds=run.virtual_s)

        def progress(share: float, message: str) -> None:
            run_report(
                RehearsalRun, pk=run.pk, progress=min(99, int(share * 100)), progress_message=message[:255]
            )

        result = rehearsal_run(scenario=sc, route=route, deployments=deps, tenants=tenants, start=start,
                               duration_s=run.virtual_s, progress=progress)  # fmt: skip
        _close(route, at=end)
    except Exception as exc:
        run_fail(RehearsalRun, pk=run.pk, error=f"{type(exc).__name__}: {exc}")
        raise
    detected = "no incident" if result["detect_s"] is None else f"detected in {result['detect_s']:g} s"
    run_finish(RehearsalRun, pk=run.pk, message=f"{detected}; cause {result['cause'] or 'unknown'}",
               result=result, incident_id=result["incident"])  # fmt: skip
    return RehearsalRun.objects.get(pk=run.pk)


def _controls(route, deployments: dict, tenants: dict) -> Controls:
    by_pk = {d.pk: name for name, d in deployments.items()}
    weights = {by_pk[t.deployment_id]: t.weight for t in route.targets.all() if t.deployment_id in by_pk}
    names = {str(t.pk): name for name, t in tenants.items()}
    limits = tenant_limits_of(tenant_ids=[t.pk for t in tenants.values()])
    replicas = {}
    for name, d in deployments.items():
        d.refresh_from_db(fields=["num_replicas"])
        replicas[name] = d.num_replicas
    route.refresh_from_db(fields=["long_context_threshold_tokens"])
    return Controls(
        long_threshold=route.long_context_threshold_tokens,
        long_pool=frozenset(name for name, d in deployments.items() if d.pool == Pool.LONG_CONTEXT),
        weights=weights,
        replicas=replicas,
        rpm_limit={names[k]: v["rpm_limit"] for k, v in limits.items()},
        max_input_tokens={names[k]: v["max_input_tokens"] for k, v in limits.items()},
        max_output_tokens={names[k]: v["max_output_tokens"] for k, v in limits.items()},
    )


def _within(slo: Slo) -> bool:
    """The SLO's last evaluation found the fast long window within the objective (burn below 1)."""
    w = (slo.last or {}).get("windows", {}).get("fast_long") or {}
    return bool(w.get("valid")) and w.get("burn", 1.0) < 1.0


def rehearsal_run(
    *,
    scenario: Scenario,
    route,
    deployments: dict,
    tenants: dict,
    start: dt.datetime,
    duration_s: float,
    tick_s: float = 5.0,
    seed: int = 0,
    fault: bool = True,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Run ``scenario`` on ``route`` (its deployments and tenants by the scenario's names) for
    ``duration_s`` virtual seconds from ``start``; returns what happened, when."""
    sim = Rehearsal(scenario, seed=seed, fault=fault)
    fault_at = start + dt.timedelta(seconds=scenario.fault_at_s)
    slos = list(Slo.objects.filter(route=route, is_active=True))
    joined = False
    detected_at = recovered_at = cleared_at = None
    incident = None
    false_incidents = 0
    t = 0.0
    while t < duration_s - 1e-9:
        if fault and scenario.fault.joins and not joined and t >= scenario.fault_at_s:
            route_weights_set(route=route, weights={deployments[scenario.fault.joins]: scenario.fault.joins_weight},
                              actor=ACTOR, reason=f"rehearsal {scenario.name}: a new release joins the route")  # fmt: skip
            joined = True
        records, metrics = sim.tick(t, t + tick_s, _controls(route, deployments, tenants))
        usage_rehearsal_record(rows=[{
            **{k: r[k] for k in ("prompt_tokens", "completion_tokens", "cached_tokens", "ttft_ms", "tpot_ms",
                                 "status", "http_status")},
            "at": start + dt.timedelta(seconds=r["at_s"]), "tenant_id": tenants[r["tenant"]].pk,
            "public_model": route.public_name,
            "deployment_id": deployments[r["deployment"]].pk if r["deployment"] else None,
            "deployment_slug": deployments[r["deployment"]].slug if r["deployment"] else "",
        } for r in records])  # fmt: skip
        t += tick_s
        now = start + dt.timedelta(seconds=t)
        EngineSample.objects.bulk_create(
            EngineSample(deployment=deployments[d], at=now, values=engine_metrics.parse(metrics_text(v)))
            for d, v in metrics.items()
        )
        for slo in slos:
            slo_evaluate(slo, now=now)  # a breach's reactions (page, incident, playbook) run on commit
        mitigations_review(now=now, route=route)
        opened = Incident.objects.filter(route=route).order_by("opened_at", "id")
        false_incidents = opened.filter(opened_at__lt=fault_at).count() if fault else opened.count()
        if fault and incident is None:
            incident = opened.filter(opened_at__gte=fault_at).first()
            detected_at = incident.opened_at if incident else None
        states = list(Slo.objects.filter(pk__in=[s.pk for s in slos]))
        if detected_at and recovered_at is None and all(_within(s) for s in states):
            recovered_at = now  # the last fast long window (1 h at full scale) is within every objective
        if detected_at and cleared_at is None and all(s.state == SloState.OK for s in states):
            cleared_at = now  # every alert condition off, the slow ticket windows (3 d / 6 h) too
        if progress is not None:
            progress(t / duration_s, f"{scenario.name}: {t:.0f} of {duration_s:.0f} virtual seconds")
    if incident is not None:
        incident.refresh_from_db()  # re-diagnosed when a later breach brought the evidence
    cause = incident.diagnosis.get("cause") if incident else None
    fault_end = fault_at + dt.timedelta(seconds=scenario.fault_for_s)
    mitigations = list(incident.mitigations.all()) if incident else []
    return {
        "scenario": scenario.name,
        "title": scenario.title,
        "expected_causes": list(scenario.causes),
        "incident": incident.pk if incident else None,
        "detect_s": (detected_at - fault_at).total_seconds() if detected_at else None,
        "cause": cause,
        "cause_named": cause in scenario.causes,
        "summary": incident.diagnosis.get("summary") if incident else None,
        "actions": [
            {
                "kind": m.kind,
                "summary": m.summary,
                "state": m.state,
                "applied_by": m.applied_by,
                "outcome": m.outcome,
            }
            for m in mitigations
        ],  # fmt: skip
        "playbook_applied": any(m.applied_at for m in mitigations),
        # From the detection until the last hour (scaled) met every objective again. Recovery before
        # the fault ended by itself is the playbook's doing; after, it is the fault's end.
        "recover_s": (recovered_at - detected_at).total_seconds() if recovered_at else None,
        "recovered_before_fault_ended": bool(recovered_at and recovered_at < fault_end),
        # The workbook's slow ticket windows (3 d / 6 h, scaled) remember the burn long after it stopped.
        "cleared_s": (cleared_at - detected_at).total_seconds() if cleared_at else None,
        "reverted": [m.outcome for m in mitigations if m.state == "reverted"],
        "false_incidents": false_incidents,
        "virtual_s": duration_s,
    }
