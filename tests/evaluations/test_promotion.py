"""The promotion rule: lifecycle moves, gated approval, audited overrides, undeployable versions."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import ProgrammingError, transaction

from audit.models import AuditEvent
from catalog.promotion import Promotion
from catalog.promotion import version_promotion as asks_the_rule
from catalog.services import model_version_transition
from deployments.services import route_target_set
from evaluations.constants import GateKind
from evaluations.models import GateDecision
from evaluations.selectors.gates import version_gate_status, version_promotion
from evaluations.services.gates import gate_policy_save
from tests.deployments.factories import ModelRouteFactory
from tests.evaluations.factories import DeploymentFactory
from tests.evaluations.gate_fixtures import policy_body
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db


def _decide(policy, version, kind, verdict):
    return GateDecision.objects.create(
        model_version=version, policy=policy, gpu_type=policy.gpu_type, kind=kind, verdict=verdict,
        label="predicted", decided_by="controller", summary=f"{kind} {verdict}",
    )  # fmt: skip


def test_approval_is_refused_until_every_required_gate_passed(policy, candidate, admin_user):
    with pytest.raises(ValidationError) as err:
        model_version_transition(version=candidate, to="approved", actor=admin_user)
    message = " ".join(err.value.messages)
    assert "quality gate has not run" in message and "H100 SXM" in message
    _decide(policy, candidate, GateKind.QUALITY, "passed")
    _decide(policy, candidate, GateKind.PERFORMANCE, "passed")
    _decide(policy, candidate, GateKind.STABILITY, "error")
    with pytest.raises(ValidationError, match="stability gate ended in error"):
        model_version_transition(version=candidate, to="approved", actor=admin_user)
    _decide(policy, candidate, GateKind.STABILITY, "passed")  # the newest decision counts
    model_version_transition(version=candidate, to="approved", actor=admin_user, reason="gates green")
    candidate.refresh_from_db()
    assert candidate.lifecycle == "approved" and not candidate.gates_overridden
    event = AuditEvent.objects.get(action="model_version.transition", object_id=str(candidate.pk))
    assert event.before == {"lifecycle": "candidate"} and event.after == {"lifecycle": "approved"}
    assert event.evidence["gates"]["passed"] is True and event.actor == "admin"


def test_a_model_without_policy_cannot_be_approved_without_override(admin_user):
    version = ModelVersionFactory(lifecycle="candidate")
    status = version_gate_status(version=version)
    assert status["passed"] is False and "no gate policy" in status["blocking"][0]
    with pytest.raises(ValidationError, match="no gate policy"):
        model_version_transition(version=version, to="approved", actor=admin_user)


def test_decisions_under_an_older_policy_do_not_count(policy, candidate, admin_user, gpu):
    for kind in GateKind.values:
        _decide(policy, candidate, kind, "passed")
    assert version_gate_status(version=candidate)["passed"]
    gate_policy_save(model=candidate.model, gpu_type=gpu, actor=admin_user, **policy_body())
    status = version_gate_status(version=candidate)
    assert not status["passed"] and status["policy_number"] == 2


def test_override_needs_a_platform_admin_and_a_written_reason(policy, candidate, admin_user, auditor_user):
    with pytest.raises(ValidationError, match="reason"):
        model_version_transition(
            version=candidate, to="approved", actor=admin_user, override=True, reason="ok"
        )
    with pytest.raises(ValidationError, match="Only a platform admin"):
        model_version_transition(
            version=candidate, to="approved", actor=auditor_user, override=True, reason="long enough reason"
        )
    candidate.refresh_from_db()
    assert candidate.lifecycle == "candidate"
    model_version_transition(
        version=candidate, to="approved", actor=admin_user, override=True,
        reason="Urgent capacity need; quality signed off by the ML lead",
    )  # fmt: skip
    candidate.refresh_from_db()
    assert candidate.lifecycle == "approved" and candidate.gates_overridden
    assert candidate.gate_override_by == admin_user
    event = AuditEvent.objects.get(action="model_version.gate_override", object_id=str(candidate.pk))
    assert event.reason.startswith("Urgent capacity") and event.evidence["gates"]["passed"] is False
    assert version_gate_status(version=candidate)["gates_overridden"] is True


def test_moves_outside_the_lifecycle_are_refused_with_human_labels(admin_user):
    version = ModelVersionFactory(lifecycle="draft")
    with pytest.raises(ValidationError) as err:
        model_version_transition(version=version, to="serving", actor=admin_user)
    text = " ".join(err.value.messages)
    assert "A Draft version cannot move to Serving" in text and "Candidate, Rejected" in text
    assert "Lifecycle." not in text
    retired = ModelVersionFactory(lifecycle="deprecated")
    model_version_transition(version=retired, to="retired", actor=admin_user)
    with pytest.raises(ValidationError, match="final state"):
        model_version_transition(version=retired, to="serving", actor=admin_user)


@pytest.mark.parametrize("lifecycle", ["rejected", "retired"])
def test_deployments_api_refuses_rejected_and_retired_versions(admin_client, gpu, lifecycle):
    version = ModelVersionFactory(lifecycle=lifecycle)
    body = {
        "name": "nope", "slug": "nope", "model_version": version.pk, "engine_kind": "simulated",
        "gpu_type": gpu.pk, "tensor_parallel_size": 1, "max_model_len": 8192,
    }  # fmt: skip
    r = admin_client.post(
        "/api/deployments/deployments/", data=json.dumps(body), content_type="application/json"
    )
    assert r.status_code == 400, r.content
    assert f"{lifecycle} versions cannot be deployed" in r.content.decode()


def test_routes_take_only_approved_or_serving_versions(gpu, admin_user):
    draft = DeploymentFactory(model_version=ModelVersionFactory(lifecycle="candidate"), gpu_type=gpu)
    route = ModelRouteFactory()
    with pytest.raises(ValidationError, match="production routes take only approved or serving"):
        route_target_set(route=route, deployment=draft, weight=10, actor="system:test")
    assert (
        route_target_set(route=route, deployment=draft, weight=0, actor="system:test").weight == 0
    )  # a drained target is fine
    serving = DeploymentFactory(model_version=ModelVersionFactory(lifecycle="serving"), gpu_type=gpu)
    assert route_target_set(route=route, deployment=serving, weight=100, actor="system:test").weight == 100


def test_gate_decisions_and_policies_are_immutable_in_the_database(policy, candidate):
    decision = _decide(policy, candidate, GateKind.QUALITY, "failed")
    with pytest.raises(ProgrammingError, match="pgtrigger"), transaction.atomic():
        type(decision).objects.filter(pk=decision.pk).update(verdict="passed")
    with pytest.raises(ProgrammingError, match="pgtrigger"), transaction.atomic():
        type(decision).objects.filter(pk=decision.pk).delete()
    with pytest.raises(ProgrammingError, match="pgtrigger"), transaction.atomic():
        type(policy).objects.filter(pk=policy.pk).update(quality={})
    decision.refresh_from_db()
    assert decision.verdict == "failed"


def test_route_targets_api_answers_400_for_a_candidate_with_traffic(admin_client, gpu):
    dep = DeploymentFactory(model_version=ModelVersionFactory(lifecycle="candidate"), gpu_type=gpu)
    route = ModelRouteFactory()
    r = admin_client.post(
        "/api/deployments/route-targets/",
        data=json.dumps({"route": route.pk, "deployment": dep.pk, "weight": 50}),
        content_type="application/json",
    )
    assert r.status_code == 400 and "approved or serving" in r.content.decode()
    assert not route.targets.exists()


# --- the promotion rule's one home: evaluations.selectors.gates.version_promotion ------------------


def test_an_approved_version_takes_traffic_only_while_its_gates_pass_under_the_current_policy(
    policy, candidate, admin_user, gpu
):
    for kind in GateKind.values:
        _decide(policy, candidate, kind, "passed")
    model_version_transition(version=candidate, to="approved", actor=admin_user)
    candidate.refresh_from_db()
    promotion = version_promotion(version=candidate)
    assert promotion.may_approve and promotion.may_take_traffic and not promotion.gates_overridden
    gate_policy_save(model=candidate.model, gpu_type=gpu, actor=admin_user, **policy_body())  # tightened
    promotion = version_promotion(version=candidate)
    assert not promotion.may_approve and not promotion.may_take_traffic
    assert "has not passed its eval gates" in promotion.traffic_refusal
    assert "quality gate has not run" in promotion.traffic_refusal


def test_an_override_lets_a_version_take_traffic_without_its_gates_passing(policy, candidate, admin_user):
    model_version_transition(
        version=candidate, to="approved", actor=admin_user, override=True,
        reason="Urgent capacity need; quality signed off by the ML lead",
    )  # fmt: skip
    candidate.refresh_from_db()
    promotion = version_promotion(version=candidate)
    assert promotion.gates_overridden and promotion.may_take_traffic and not promotion.may_approve
    assert promotion.evidence["gates_overridden"] is True and promotion.traffic_refusal == ""


def test_a_version_not_yet_approved_takes_no_traffic_whatever_its_gates(policy, candidate):
    for kind in GateKind.values:
        _decide(policy, candidate, kind, "passed")
    promotion = version_promotion(version=candidate)
    assert promotion.may_approve and not promotion.may_take_traffic
    assert "production routes take only approved or serving versions" in promotion.traffic_refusal


def always_yes(*, version) -> Promotion:
    return Promotion(may_approve=True, may_take_traffic=True, gates_overridden=False, evidence={"stub": True})


def test_the_lifecycle_and_the_rollouts_ask_the_one_rule_named_in_settings(settings, candidate, admin_user):
    """Nothing below evaluations restates the rule: swap it, and approval and canary admission follow."""
    from deployments.rollouts.services import canary_admission_problem

    canary = DeploymentFactory(model_version=candidate)
    assert "is candidate" in canary_admission_problem(deployment=canary)
    with pytest.raises(ValidationError, match="no gate policy"):
        model_version_transition(version=candidate, to="approved", actor=admin_user)
    settings.GOVERNOR_PROMOTION_RULE = "tests.evaluations.test_promotion.always_yes"
    assert canary_admission_problem(deployment=canary) is None
    model_version_transition(version=candidate, to="approved", actor=admin_user, reason="stub rule")
    event = AuditEvent.objects.get(action="model_version.transition", object_id=str(candidate.pk))
    assert event.evidence == {"gates": {"stub": True}}


def test_without_a_configured_rule_nothing_is_approved_or_admitted(settings, candidate, admin_user):
    from deployments.rollouts.services import canary_admission_problem

    settings.GOVERNOR_PROMOTION_RULE = ""
    assert not asks_the_rule(version=candidate).may_approve
    with pytest.raises(ValidationError, match="no promotion rule is configured"):
        model_version_transition(version=candidate, to="approved", actor=admin_user)
    served = ModelVersionFactory(model=candidate.model, lifecycle="serving")
    assert "no promotion rule is configured" in canary_admission_problem(
        deployment=DeploymentFactory(model_version=served)
    )
