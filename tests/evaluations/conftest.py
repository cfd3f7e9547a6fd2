"""Fixtures of the gate tests: a serving bf16 baseline, an FP8 candidate, deployments, a suite, a policy."""

from __future__ import annotations

import pytest

from evaluations.services.evals import eval_suite_upload
from evaluations.services.gates import gate_policy_save
from tests.evaluations.factories import DeploymentFactory
from tests.evaluations.gate_fixtures import SUITE, policy_body
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory


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


@pytest.fixture
def policy(candidate, gpu, deployments, suite, admin_user):
    return gate_policy_save(model=candidate.model, gpu_type=gpu, actor=admin_user, reason="first policy",
                            **policy_body())  # fmt: skip
