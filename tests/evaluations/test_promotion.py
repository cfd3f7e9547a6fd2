"""The promotion rule: lifecycle moves, gated approval, audited overrides, undeployable versions."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import ProgrammingError, transaction

from audit.models import AuditEvent
from catalog.services import model_version_transition
from deployments.services import route_target_set
from evaluations.constants import GateKind
from evaluations.models import GateDecision
from evaluations.selectors.gates import version_gate_status
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
    from evaluations.services.gates import gate_policy_save

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
    assert version_gate_status(version=candidate)["override"] is True


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
