"""The eval demo: built-in suites, quality profiles, candidate deployments and a policy per model."""

from __future__ import annotations

import pytest

from catalog.models import ModelVersion
from deployments.compiler import compile_application
from deployments.models import Deployment
from evaluations.models import EvalSuite, GatePolicy
from governor.demo import seed_demo

pytestmark = pytest.mark.django_db


def test_seed_demo_prepares_gates_for_the_fp8_version_once():
    seed_demo()
    seed_demo()  # idempotent: nothing added twice
    suite = EvalSuite.objects.get(name="governor-core")
    assert suite.builtin and suite.versions.count() == 1
    assert set(suite.versions.get().categories) == {"arithmetic", "json_extraction", "needle", "refusal"}
    fp8 = ModelVersion.objects.get(model__name="Llama-3.1-8B-Instruct", label="fp8")
    poor = ModelVersion.objects.get(model__name="Llama-3.1-8B-Instruct", label="int4-rtn")
    assert (
        poor.quality_profile["categories"]["json_extraction"]
        < 0.7
        <= fp8.quality_profile["categories"]["json_extraction"]
    )
    policy = GatePolicy.objects.get(model=fp8.model)
    assert policy.gpu_type.name == "H100 SXM" and policy.required_kinds == [
        "quality",
        "performance",
        "stability",
    ]
    assert GatePolicy.objects.count() == 2
    dep = Deployment.objects.live().get(slug="llama-3-1-8b-fp8-h100")
    assert dep.model_version == fp8 and dep.engine_kind == "simulated"
    app = compile_application(dep)
    assert app["args"]["quality"] == fp8.quality_profile
