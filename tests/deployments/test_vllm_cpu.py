"""A ``vllm-cpu`` deployment of the generated tiny model, reconciled onto Ray Serve, answers a completion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import openai
import pytest

from deployments import services
from deployments.reconciler import deployments_reconcile
from tests.deployments.conftest import wait_for
from tests.factories import ModelFactory, ModelVersionFactory
from tests.support.ci import skip_unless_ci

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model_path() -> Path:
    if importlib.util.find_spec("engines.vllm_serve_app") is None:
        skip_unless_ci("engines.vllm_serve_app (the vLLM-CPU Serve wrapper) is not in this checkout yet")
    from engines.vllm_cpu import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        skip_unless_ci(reason)
    from engines.tiny_model import ensure_tiny_model

    return ensure_tiny_model(ROOT / "var" / "models" / "tiny-llama").resolve()


def test_vllm_cpu_deployment_of_the_tiny_model_answers(tiny_model_path, ray_env, void_queue, admin_user):
    from engines.tiny_model import (
        HEAD_DIM,
        HEADS,
        HIDDEN,
        KV_HEADS,
        LAYERS,
        MAX_POSITIONS,
        TARGET_VOCAB,
        tiny_model_params,
    )

    model = ModelFactory(
        name="tiny-llama",
        family="llama",
        parameter_count=tiny_model_params(TARGET_VOCAB),
        layers=LAYERS,
        hidden_size=HIDDEN,
        attention_heads=HEADS,
        kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        vocab_size=TARGET_VOCAB,
        max_context=MAX_POSITIONS,
    )
    version = ModelVersionFactory(model=model, label="generated", weights_uri=f"file://{tiny_model_path}")
    deployment, _ = services.deployment_create(
        actor=admin_user,
        name="tiny on vLLM-CPU",
        slug="tiny-cpu",
        model_version=version,
        engine_kind="vllm-cpu",
        gpu_type=None,
        served_model_name="tiny",
        max_model_len=1024,
        max_num_seqs=8,
        max_num_batched_tokens=1024,
    )

    def running() -> bool:
        deployments_reconcile(trigger="test")
        deployment.refresh_from_db()
        if deployment.status == "DEPLOY_FAILED":
            raise AssertionError(deployment.last_error)
        return deployment.status == "RUNNING"

    wait_for(running, timeout=420, interval=2, what="vllm-cpu deployment RUNNING")
    client = openai.OpenAI(base_url=deployment.openai_base_url, api_key="unused", max_retries=0, timeout=120)
    completion = client.completions.create(model="tiny", prompt="Prefill processes", max_tokens=8)
    assert completion.usage.completion_tokens > 0
    assert completion.choices[0].text
