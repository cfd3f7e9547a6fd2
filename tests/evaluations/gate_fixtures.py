"""Shared set-up of the gate tests: a serving bf16 baseline, an FP8 candidate, deployments, a policy."""

from __future__ import annotations

import pytest

from evaluations.evalruns import eval_suite_upload
from evaluations.gates import gate_policy_save
from tests.evaluations.factories import DeploymentFactory
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory

SUITE = "\n".join(
    f'{{"id": "a{i}", "category": "arithmetic", "prompt": "What is {i} + 1?", "expected": {i + 1}, "scorer": "numeric"}}'
    for i in range(12)
)


@pytest.fixture
def gpu(db):
    return GpuTypeFactory()


@pytest.fixture
def baseline(db):
    return ModelVersionFactory(model=ModelFactory(), label="bf16", lifecycle="serving")


@pytest.fixture
def candidate(baseline):
    return ModelVersionFactory(
        model=baseline.model, label="fp8", precision="fp8", lifecycle="candidate", baseline=baseline
    )


@pytest.fixture
def deployments(baseline, candidate, gpu):
    common = dict(engine_kind="simulated", gpu_type=gpu, tensor_parallel_size=1, status="RUNNING")
    return {
        "baseline": DeploymentFactory(model_version=baseline, slug="gate-bf16", **common),
        "candidate": DeploymentFactory(model_version=candidate, slug="gate-fp8", **common),
    }


@pytest.fixture
def suite(admin_user):
    return eval_suite_upload(name="tiny-arith", content=SUITE, actor=admin_user)


def policy_body(**over) -> dict:
    body = {
        "quality": {"required": True, "suite": "tiny-arith", "baseline": "serving",
                    "default": {"max_drop": 0.5, "min_score": 0.0}},
        "performance": {"required": True, "workload": {"input": {"kind": "fixed", "value": 64},
                                                        "output": {"kind": "fixed", "value": 32}},
                        "sla": {"ttft_ms": 2000, "tpot_ms": 100}, "stage_duration_s": 10,
                        "min_goodput_ratio": 0.5, "max_p95_ttft_ms": 2000, "max_p95_tpot_ms": 100,
                        "kv_context_tokens": 8192, "min_kv_seqs": 4},
        "stability": {"required": True, "duration_s": 20, "length_mix": [{"input": 64, "output": 32, "weight": 3},
                                                                          {"input": 512, "output": 64, "weight": 1}],
                      "waves": {"low_rps": 1, "high_rps": 4, "period_s": 10},
                      "max_error_rate": 0.01, "max_preemptions": 0, "max_restarts": 0},
    }  # fmt: skip
    for key, value in over.items():
        body[key] = value
    return body


@pytest.fixture
def policy(candidate, gpu, deployments, suite, admin_user):
    return gate_policy_save(model=candidate.model, gpu_type=gpu, actor=admin_user, reason="first policy",
                            **policy_body())  # fmt: skip
