"""The rollout services: creation rules, every controller transition, admins' actions, audit events,
and serialisation of two actions at the same moment (real PostgreSQL row locks, two threads)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from audit.models import AuditEvent
from catalog.models import ModelVersion
from deployments.models import AnalysisRun, Rollout, RouteTarget
from deployments.rollouts import services as S
from tests.deployments.factories import DeploymentFactory
from tests.deployments.rollout_fixtures import (
    FAST_STEPS,
    FAST_STEPS_STORED,
    TTFT_CHECK,
    route_with_canary,
    usage,
    weights,
)

pytestmark = pytest.mark.django_db


def _start(setup, steps=FAST_STEPS, checks=TTFT_CHECK, actor="admin-test", **kw) -> Rollout:
    return S.rollout_create(
        route=setup.route,
        stable=setup.stable,
        canary=setup.canary,
        steps=steps,
        checks=checks,
        actor=actor,
        **kw,
    )


def _actions(rollout) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="deployments.rollout", object_id=str(rollout.pk))
        .order_by("seq")
        .values_list("action", flat=True)
    )


# --- creation -----------------------------------------------------------------------------------


def test_start_adds_the_canary_at_weight_zero_and_records_the_plan():
    setup = route_with_canary()
    rollout = _start(setup)
    assert weights(setup.route) == {setup.stable.pk: 100, setup.canary.pk: 0}
    assert rollout.phase == "progressing" and rollout.outcome == ""
    event = AuditEvent.objects.get(action="rollout.start")
    assert event.after["steps"] == FAST_STEPS_STORED and event.after["canary"] == setup.canary.slug


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (lambda s: {"canary": s.stable}, "canary", "different deployment"),
        (lambda s: {"steps": [{"kind": "set_weight", "weight": 50}]}, "steps", "must be 100"),
        (lambda s: {"checks": []}, "checks", "no checks"),
        (lambda s: {"failure_limit": 3}, "failure_limit", "smaller than the number of checks"),
        (lambda s: {"stable": DeploymentFactory()}, "stable", "does not serve"),
    ],
)
def test_bad_rollouts_are_refused_and_change_nothing(mutate, field, message):
    setup = route_with_canary()
    kwargs = {
        "route": setup.route,
        "stable": setup.stable,
        "canary": setup.canary,
        "steps": FAST_STEPS,
        "checks": TTFT_CHECK,
        "actor": "t",
    }
    kwargs.update(mutate(setup))
    before = weights(setup.route)
    with pytest.raises(ValidationError) as exc:
        S.rollout_create(**kwargs)
    assert message in " ".join(exc.value.message_dict[field])
    assert weights(setup.route) == before
    assert not Rollout.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize("lifecycle", ["draft", "candidate", "rejected", "deprecated"])
def test_a_canary_whose_version_is_not_approved_cannot_start(lifecycle):
    setup = route_with_canary(canary_lifecycle=lifecycle)
    with pytest.raises(ValidationError) as exc:
        _start(setup)
    assert f"is {lifecycle}" in exc.value.message_dict["canary"][0]
    assert not Rollout.objects.exists()


def test_an_approved_canary_without_passed_gates_or_an_override_cannot_start():
    setup = route_with_canary(gates_overridden=False)
    with pytest.raises(ValidationError) as exc:
        _start(setup)
    message = exc.value.message_dict["canary"][0]
    assert "has not passed its eval gates" in message and "no gate policy" in message
    assert not Rollout.objects.exists()


def test_a_second_active_rollout_on_the_route_is_refused():
    setup = route_with_canary()
    _start(setup)
    other = DeploymentFactory(model_version=setup.canary.model_version)
    with pytest.raises(ValidationError) as exc:
        S.rollout_create(
            route=setup.route,
            stable=setup.stable,
            canary=other,
            steps=FAST_STEPS,
            checks=TTFT_CHECK,
            actor="t",
        )
    assert "already has an active rollout" in exc.value.message_dict["route"][0]


def test_a_route_that_also_sends_traffic_elsewhere_is_refused():
    setup = route_with_canary()
    RouteTarget.objects.create(route=setup.route, deployment=DeploymentFactory(), weight=30)
    with pytest.raises(ValidationError) as exc:
        _start(setup)
    assert "would not add up" in exc.value.message_dict["route"][0]


# --- the controller, step by step ------------------------------------------------------------------


def test_controller_sets_weight_then_waits_for_the_analysis_window():
    setup = route_with_canary()
    rollout = _start(setup)
    t0 = timezone.now()
    assert S.rollout_advance(rollout_id=rollout.pk, now=t0) == "analysing"
    assert weights(setup.route) == {setup.stable.pk: 80, setup.canary.pk: 20}
    run = AnalysisRun.objects.get(rollout=rollout)
    assert run.window_end - run.window_start == dt.timedelta(seconds=30) and run.enqueued_at is None
    # Before the window closes nothing is enqueued; after it (plus the shipping grace) it is.
    S.rollout_advance(rollout_id=rollout.pk, now=t0 + dt.timedelta(seconds=29))
    run.refresh_from_db()
    assert run.enqueued_at is None
    S.rollout_advance(rollout_id=rollout.pk, now=t0 + dt.timedelta(seconds=32))
    run.refresh_from_db()
    assert run.enqueued_at is not None
    assert "rollout.set_weight" in _actions(rollout)


def _run_to_analysis(setup, **kw):
    rollout = _start(setup, **kw)
    t0 = timezone.now() - dt.timedelta(seconds=60)
    S.rollout_advance(rollout_id=rollout.pk, now=t0)
    return rollout, AnalysisRun.objects.get(rollout=rollout), t0


def test_passing_analysis_promotes_and_moves_the_versions():
    setup = route_with_canary()
    rollout, run, t0 = _run_to_analysis(setup)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=5), n=20, ttft_ms=100)
    usage(setup.canary, at=t0 + dt.timedelta(seconds=5), n=10, ttft_ms=110)
    run = S.analysis_run_execute(run_id=run.pk)
    assert run.verdict == "passed"
    assert run.results[0]["canary"] == 110 and run.results[0]["canary_samples"] == 10
    rollout.refresh_from_db()
    assert (rollout.phase, rollout.outcome, rollout.canary_weight) == ("healthy", "promoted", 100)
    assert weights(setup.route) == {setup.stable.pk: 0, setup.canary.pk: 100}
    assert ModelVersion.objects.get(pk=setup.canary.model_version_id).lifecycle == "serving"
    assert ModelVersion.objects.get(pk=setup.stable.model_version_id).lifecycle == "deprecated"
    assert _actions(rollout) == [
        "rollout.start",
        "rollout.set_weight",
        "rollout.analysis_passed",
        "rollout.set_weight",
        "rollout.promote",
    ]
    transitions = AuditEvent.objects.filter(action="model_version.transition", actor="controller")
    assert {e.after["lifecycle"] for e in transitions} == {"serving", "deprecated"}


def test_rollout_aborts_when_canary_ttft_breaches_and_restores_stable():
    setup = route_with_canary()
    rollout, run, t0 = _run_to_analysis(setup)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=5), n=20, ttft_ms=100)
    usage(setup.canary, at=t0 + dt.timedelta(seconds=5), n=10, ttft_ms=600)
    S.analysis_run_execute(run_id=run.pk)
    rollout.refresh_from_db()
    assert (rollout.phase, rollout.outcome, rollout.canary_weight) == ("degraded", "aborted", 0)
    assert weights(setup.route) == {setup.stable.pk: 100, setup.canary.pk: 0}
    assert "ttft_p95_ms (p95 TTFT): canary 600.0 ms, limit ≤ 150.0 ms (stable 100.0 ms)" in rollout.message
    event = AuditEvent.objects.get(action="rollout.abort")
    assert event.actor == "controller" and event.evidence["results"][0]["canary"] == 600
    assert ModelVersion.objects.get(pk=setup.canary.model_version_id).lifecycle == "approved"


def test_usage_outside_the_window_or_of_other_deployments_is_not_counted():
    setup = route_with_canary()
    rollout, run, t0 = _run_to_analysis(setup)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=5), n=20)
    usage(setup.canary, at=t0 - dt.timedelta(seconds=5), n=10, ttft_ms=900)  # before the window
    usage(DeploymentFactory(), at=t0 + dt.timedelta(seconds=5), n=10, ttft_ms=900)  # someone else
    run = S.analysis_run_execute(run_id=run.pk)
    assert run.verdict == "inconclusive" and run.results[0]["canary_samples"] == 0


def _latest_run(rollout) -> AnalysisRun:
    return AnalysisRun.objects.filter(rollout=rollout).order_by("-id").first()


def test_inconclusive_analysis_measures_again_over_a_longer_window_then_pauses():
    setup = route_with_canary()
    rollout, run, t0 = _run_to_analysis(setup)
    S.analysis_run_execute(run_id=run.pk)
    rollout.refresh_from_db()
    longer = _latest_run(rollout)
    assert rollout.phase == "progressing" and "measuring again until 60 s" in rollout.message
    assert (longer.window_start, longer.window_end) == (run.window_start, t0 + dt.timedelta(seconds=60))
    S.analysis_run_execute(run_id=longer.pk)
    longest = _latest_run(rollout)
    assert longest.window_end == t0 + dt.timedelta(seconds=90)  # the default: 3 × the window
    S.analysis_run_execute(run_id=longest.pk)
    rollout.refresh_from_db()
    assert rollout.phase == "paused" and "canary has 0 samples" in rollout.message
    assert AnalysisRun.objects.filter(rollout=rollout).count() == 3
    assert weights(setup.route)[setup.canary.pk] == 20  # a pause keeps the traffic split
    assert _actions(rollout).count("rollout.analysis_extended") == 2
    S.rollout_resume(rollout=rollout, actor="admin-test")
    rollout.refresh_from_db()
    assert rollout.phase == "progressing" and rollout.step_index == 1
    S.rollout_advance(rollout_id=rollout.pk, now=rollout.step_started_at)
    assert AnalysisRun.objects.filter(rollout=rollout).count() == 4


def test_events_that_arrive_after_a_window_is_read_count_in_the_longer_window():
    setup = route_with_canary()
    rollout, run, t0 = _run_to_analysis(setup)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=5), n=20, ttft_ms=100)
    S.analysis_run_execute(run_id=run.pk)  # the canary's events have not shipped yet
    usage(setup.canary, at=t0 + dt.timedelta(seconds=10), n=10, ttft_ms=600)  # now they have
    longer = S.analysis_run_execute(run_id=_latest_run(rollout).pk)
    assert longer.verdict == "failed" and longer.results[0]["canary_samples"] == 10
    rollout.refresh_from_db()
    assert (rollout.phase, rollout.outcome) == ("degraded", "aborted")


def test_an_analysis_without_room_to_grow_pauses_at_once():
    setup = route_with_canary()
    steps = [
        {"kind": "set_weight", "weight": 20},
        {"kind": "analysis", "window_s": 30, "max_window_s": 30},
        {"kind": "set_weight", "weight": 100},
    ]
    rollout, run, _ = _run_to_analysis(setup, steps=steps)
    S.analysis_run_execute(run_id=run.pk)
    rollout.refresh_from_db()
    assert rollout.phase == "paused" and AnalysisRun.objects.filter(rollout=rollout).count() == 1


def test_manual_pause_step_waits_for_an_admin_then_continues():
    setup = route_with_canary()
    steps = [{"kind": "set_weight", "weight": 10}, {"kind": "pause"}, {"kind": "set_weight", "weight": 100}]
    rollout = _start(setup, steps=steps, checks=[])
    assert S.rollout_advance(rollout_id=rollout.pk) == "paused"
    rollout.refresh_from_db()
    assert rollout.phase == "paused" and rollout.step_index == 1
    S.rollout_resume(rollout=rollout, actor="admin-test")
    assert S.rollout_advance(rollout_id=rollout.pk) == "promoted"


def test_timed_pause_step_continues_by_itself():
    setup = route_with_canary()
    steps = [
        {"kind": "set_weight", "weight": 10},
        {"kind": "pause", "seconds": 60},
        {"kind": "set_weight", "weight": 100},
    ]
    rollout = _start(setup, steps=steps, checks=[])
    t0 = timezone.now()
    assert S.rollout_advance(rollout_id=rollout.pk, now=t0) == "waiting"
    assert S.rollout_advance(rollout_id=rollout.pk, now=t0 + dt.timedelta(seconds=61)) == "promoted"


# --- admins' actions -------------------------------------------------------------------------------


def test_pause_then_resume_then_manual_promote():
    setup = route_with_canary()
    rollout = _start(setup)
    S.rollout_advance(rollout_id=rollout.pk)
    S.rollout_pause(rollout=rollout, actor="admin-test", reason="lunch")
    assert S.rollout_advance(rollout_id=rollout.pk) == "idle"  # the controller leaves it alone
    with pytest.raises(ValidationError, match="Cannot pause"):
        S.rollout_pause(rollout=rollout, actor="admin-test")
    S.rollout_resume(rollout=rollout, actor="admin-test")
    S.rollout_promote(rollout=rollout, actor="admin-test", reason="looks good")
    rollout.refresh_from_db()
    assert rollout.outcome == "promoted" and weights(setup.route)[setup.canary.pk] == 100
    assert _actions(rollout)[-3:] == ["rollout.pause", "rollout.resume", "rollout.promote"]


def test_manual_abort_then_no_further_action_applies():
    setup = route_with_canary()
    rollout = _start(setup)
    S.rollout_advance(rollout_id=rollout.pk)
    S.rollout_abort(rollout=rollout, actor="admin-test", reason="bad answers")
    assert weights(setup.route) == {setup.stable.pk: 100, setup.canary.pk: 0}
    for action in (S.rollout_promote, S.rollout_resume, S.rollout_abort, S.rollout_pause):
        with pytest.raises(ValidationError):
            action(rollout=rollout, actor="admin-test")
    with pytest.raises(ValidationError, match="Only a promoted rollout"):
        S.rollout_rollback(rollout=rollout, actor="admin-test")


def test_rollback_after_promotion_restores_the_previous_stable_and_versions():
    setup = route_with_canary()
    rollout = _start(setup)
    S.rollout_promote(rollout=rollout, actor="admin-test")
    S.rollout_rollback(rollout=rollout, actor="admin-test", reason="regression found later")
    rollout.refresh_from_db()
    assert (rollout.phase, rollout.outcome) == ("degraded", "rolled_back")
    assert weights(setup.route) == {setup.stable.pk: 100, setup.canary.pk: 0}
    assert ModelVersion.objects.get(pk=setup.stable.model_version_id).lifecycle == "serving"
    assert ModelVersion.objects.get(pk=setup.canary.model_version_id).lifecycle == "deprecated"
    assert _actions(rollout)[-1] == "rollout.rollback"


def test_a_deleted_canary_aborts_the_rollout_and_one_broken_rollout_does_not_stop_the_others():
    from deployments.services import deployment_delete

    first = route_with_canary()
    second = route_with_canary()
    r1, r2 = _start(first), _start(second)
    deployment_delete(deployment=first.canary, actor="t")
    results = S.rollouts_tick()
    assert results == {r1.pk: "aborted", r2.pk: "analysing"}
    r1.refresh_from_db()
    assert r1.outcome == "aborted" and "was deleted" in r1.message
    assert weights(first.route) == {first.stable.pk: 100}


# --- faults -----------------------------------------------------------------------------------------


def test_faults_are_validated_audited_and_compiled_into_the_engine_args():
    from deployments.compiler import compile_application
    from deployments.services import deployment_faults_set

    d = DeploymentFactory()
    with pytest.raises(ValidationError, match="error_rate must be between 0 and 1"):
        deployment_faults_set(deployment=d, faults={"error_rate": 3}, actor="t")
    deployment_faults_set(
        deployment=d, faults={"ttft_extra_ms": 500, "error_rate": 0}, actor="t", reason="rehearsal"
    )
    d.refresh_from_db()
    assert d.faults == {"ttft_extra_ms": 500.0}
    assert compile_application(d)["args"]["faults"] == {"ttft_extra_ms": 500.0}
    event = AuditEvent.objects.get(action="deployment.faults")
    assert event.after == {"faults": {"ttft_extra_ms": 500.0}} and "rehearsal" in event.reason


# --- serialisation ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_actions_at_the_same_moment_cannot_both_apply(void_queue):
    """An admin's promote and abort race on one rollout: exactly one applies, the other is refused."""
    setup = route_with_canary()
    rollout = _start(setup)
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def act(name, fn):
        try:
            barrier.wait(5)
            fn(rollout=Rollout.objects.get(pk=rollout.pk), actor="admin-test")
            outcomes[name] = "applied"
        except ValidationError:
            outcomes[name] = "refused"
        finally:
            connection.close()

    threads = [
        threading.Thread(target=act, args=("promote", S.rollout_promote)),
        threading.Thread(target=act, args=("abort", S.rollout_abort)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes.values()) == ["applied", "refused"], outcomes
    rollout.refresh_from_db()
    winner = next(k for k, v in outcomes.items() if v == "applied")
    assert rollout.outcome == {"promote": "promoted", "abort": "aborted"}[winner]
    assert AuditEvent.objects.filter(action__in=["rollout.promote", "rollout.abort"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_controller_ticks_at_once_apply_a_step_once(void_queue):
    setup = route_with_canary()
    rollout = _start(setup)
    barrier = threading.Barrier(2)
    results: list[str] = []

    def tick():
        try:
            barrier.wait(5)
            results.append(S.rollout_advance(rollout_id=rollout.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert AuditEvent.objects.filter(action="rollout.set_weight").count() == 1
    assert AnalysisRun.objects.filter(rollout=rollout).count() == 1
    assert sorted(results) in (["analysing", "busy"], ["analysing", "analysing"])


def test_the_controller_is_on_the_beat_schedule_every_two_seconds():
    import deployments.tasks  # noqa: F401  (registers the tasks, as the worker's autodiscovery does)
    from workers.celery import app

    entry = app.conf.beat_schedule["deployments-rollouts-tick"]
    assert entry["task"] == "deployments.rollouts_tick" and entry["schedule"] == 2.0
    assert "deployments.rollouts_tick" in app.tasks and "deployments.analysis_run" in app.tasks
