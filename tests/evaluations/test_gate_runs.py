"""Gate runs end to end in-process: policy validation, each gate's decision, errors never pass."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from evaluations.models import EvalSuiteVersion, GateDecision, GatePolicy
from evaluations.selectors.gates import version_gate_status
from evaluations.services.gates import gate_policy_save, gate_run_execute, gate_run_start
from tests.evaluations.gate_fixtures import SUITE, policy_body
from tests.factories import GpuTypeFactory, ModelVersionFactory
from tests.support.servers import engines_fixed_server

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "override,field,message",
    [
        ({"quality": {"required": True, "suite": "tiny-arith", "default": {"max_drop": 1.5}}},
         "quality.default.max_drop", "quality.default.max_drop (score points, 0–1): must be between 0 and 1 (got 1.5)"),
        ({"quality": {"required": True, "suite": "nope", "default": {"max_drop": 0.1}}}, "quality.suite", "No eval suite"),
        ({"stability": {"required": True, "duration_s": 5, "length_mix": [{"input": 1, "output": 1}],
                        "waves": {"low_rps": 1, "high_rps": 2, "period_s": 10}}}, "stability.duration_s", "stability.duration_s (soak seconds): must be between 10 and 86,400 (got 5)"),
        ({"stability": {"required": True, "duration_s": 60, "length_mix": [{"input": 1, "output": 1}],
                        "waves": {"low_rps": 5, "high_rps": 2, "period_s": 10}}}, "stability.waves.low_rps", "cannot exceed"),
        ({"performance": {"required": True, "workload": {"input": {"kind": "fixed", "value": 8},
                          "output": {"kind": "fixed", "value": 8}}, "sla": {"ttft_ms": 100},
                          "min_kv_seqs": -3, "kv_context_tokens": 100}}, "performance.min_kv_seqs", "performance.min_kv_seqs (sequences at that context): must be between 1 and 100,000 (got -3)"),
    ],
)  # fmt: skip
def test_policy_validation_names_the_bad_field_and_saves_nothing(
    candidate, gpu, deployments, suite, admin_user, override, field, message
):
    with pytest.raises(ValidationError) as err:
        gate_policy_save(model=candidate.model, gpu_type=gpu, actor=admin_user, **policy_body(**override))
    assert message in " ".join(err.value.message_dict[field])
    assert not GatePolicy.objects.exists()


def test_a_required_gate_on_a_gpu_type_without_deployment_is_refused(
    candidate, deployments, suite, admin_user
):
    l40s = GpuTypeFactory(name="L40S")
    with pytest.raises(ValidationError) as err:
        gate_policy_save(model=candidate.model, gpu_type=l40s, actor=admin_user, **policy_body())
    assert "is deployed on L40S" in err.value.message_dict["gpu_type"][0]
    assert not GatePolicy.objects.exists()


def test_each_policy_save_is_a_new_audited_version(policy, candidate, gpu, admin_user):
    from audit.models import AuditEvent

    body = policy_body()
    body["stability"]["max_preemptions"] = 5
    second = gate_policy_save(
        model=candidate.model, gpu_type=gpu, actor=admin_user, reason="tolerate some", **body
    )
    assert (policy.number, second.number) == (1, 2)
    events = AuditEvent.objects.filter(action="gate_policy.save").order_by("seq")
    assert events.count() == 2
    assert events.last().before["stability"]["max_preemptions"] == 0
    assert events.last().after["stability"]["max_preemptions"] == 5 and "quality" not in events.last().after


def test_suite_upload_names_the_bad_line_and_saves_nothing(admin_user):
    from evaluations.services.evals import eval_suite_upload

    bad = SUITE + '\n{"id": "x", "category": "arithmetic", "prompt": "?", "scorer": "numeric"}\n'
    with pytest.raises(ValidationError, match="Line 13: missing field 'expected'"):
        eval_suite_upload(name="broken", content=bad, actor=admin_user)
    assert not EvalSuiteVersion.objects.exists()


@pytest.mark.django_db(
    transaction=True
)  # committed rows, as in a worker: the result saver has its own connection
def test_predicted_gates_decide_every_gate_with_evidence(
    settings, policy, candidate, deployments, admin_user
):
    with engines_fixed_server(5, 1) as url:
        settings.RAY_SERVE_URL = url.removesuffix("/v1")
        run = gate_run_start(version=candidate, actor=admin_user, enqueue=False)
        run = gate_run_execute(run_id=run.pk)
    assert run.status == "done"
    decisions = {d.kind: d for d in GateDecision.objects.filter(gate_run=run)}
    assert set(decisions) == {"quality", "performance", "stability"}
    q = decisions["quality"]
    assert q.label == "simulated" and q.eval_run and q.baseline_eval_run
    assert (
        q.eval_run.case_results.count() == 12
        and q.baseline_version_id == deployments["baseline"].model_version_id
    )
    p = decisions["performance"]
    assert p.label == "predicted" and p.benchmark_run.kind == "predicted" and p.baseline_benchmark_run
    assert p.measured["capacity_rps"] == p.benchmark_run.capacity_rps
    s = decisions["stability"]
    assert s.benchmark_run.mode == "ladder" and s.measured["levels"][:2] == [1.0, 4.0]
    for d in decisions.values():
        assert d.verdict in ("passed", "failed"), (d.kind, d.summary)
        assert d.checks and all("passed" in c for c in d.checks)
    status = version_gate_status(version=candidate)
    assert status["passed"] == all(d.verdict == "passed" for d in decisions.values())


@pytest.mark.django_db(transaction=True)
def test_a_gate_whose_deployment_is_down_ends_in_error_never_passed(
    settings, policy, candidate, deployments, admin_user
):
    from tests.support.servers import free_port

    settings.RAY_SERVE_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request fails
    run = gate_run_start(version=candidate, actor=admin_user, kinds=["quality"], enqueue=False)
    run = gate_run_execute(run_id=run.pk)
    decision = GateDecision.objects.get(gate_run=run)
    assert decision.verdict == "error"
    assert "failed" in decision.summary and decision.eval_run is not None
    assert not version_gate_status(version=candidate)["passed"]


def test_a_gate_run_whose_worker_died_is_reaped_to_error(policy, candidate, admin_user):
    from datetime import timedelta

    from django.utils import timezone

    from core.lifecycle import runs_reap_stale
    from evaluations.models import GateRun

    run = gate_run_start(version=candidate, actor=admin_user, enqueue=False)
    GateRun.objects.filter(pk=run.pk).update(
        status="running", heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    fresh = gate_run_start(version=ModelVersionFactory(model=candidate.model, lifecycle="candidate"), actor=admin_user,
                           enqueue=False)  # fmt: skip
    GateRun.objects.filter(pk=fresh.pk).update(status="running", heartbeat_at=timezone.now())
    assert runs_reap_stale(GateRun) == 1
    run.refresh_from_db()
    fresh.refresh_from_db()
    assert run.status == "error" and "worker" in run.error and fresh.status == "running"
    assert not version_gate_status(version=candidate)["passed"]
