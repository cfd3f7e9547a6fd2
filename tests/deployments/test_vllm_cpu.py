"""A ``vllm-cpu`` deployment of the generated tiny model, reconciled onto Ray Serve on a real private
Ray cluster: real vLLM on CPU answers through Serve's proxy, streams, reports its metrics, passes its
errors through, stops generating for a client that left, and goes away when the deployment stops.

The app config is what ``deployments.compiler`` writes for the deployment, GPU-only engine arguments
included, so this also proves ``engines.vllm_serve_app`` adapts them to the CPU backend. (One Ray
cluster and one vLLM start serve every check: each costs minutes on a busy 2-core host.)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx
import openai
import pytest

from deployments import services
from deployments.reconciler import deployments_reconcile
from tests.deployments.conftest import wait_for
from tests.engines.test_vllm_cpu import metric_samples
from tests.factories import ModelFactory, ModelVersionFactory
from tests.support.ci import skip_unless_ci

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
# Unique per run: the test finds its replica's vLLM child by this name in /proc.
SERVED = f"tiny-{os.getpid()}"


def vllm_children() -> list[int]:
    """PIDs of vLLM API servers started for this test's served model name."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vllm.entrypoints.openai.api_server" in cmdline[:3] and SERVED.encode() in cmdline:
            pids.append(int(entry))
    return pids


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
        served_model_name=SERVED,
        # Room for the abandoned 2,000-token stream below (a longer request would be refused).
        max_model_len=2048,
        max_num_seqs=8,
        max_num_batched_tokens=2048,
    )

    def running() -> bool:
        deployments_reconcile(trigger="test")
        deployment.refresh_from_db()
        if deployment.status == "DEPLOY_FAILED":
            raise AssertionError(deployment.last_error)
        return deployment.status == "RUNNING"

    wait_for(running, timeout=900, interval=2, what="vllm-cpu deployment RUNNING")
    client = openai.OpenAI(base_url=deployment.openai_base_url, api_key="unused", max_retries=0, timeout=300)
    assert [m.id for m in client.models.list().data] == [SERVED]
    done = client.completions.create(
        model=SERVED, prompt="Prefill processes", max_tokens=16, extra_body={"ignore_eos": True}
    )
    assert done.usage.completion_tokens == 16 and done.choices[0].text

    chunks = list(
        client.chat.completions.create(
            model=SERVED,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    # Streamed through Serve's proxy in more than one event (vLLM itself merges deltas when its
    # engine gets ahead of the API server, so the exact count depends on the machine's load).
    assert len(content) >= 2
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12

    base = deployment.openai_base_url.removesuffix("/v1")
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200
    metrics = metric_samples(httpx.get(f"{base}/metrics", timeout=30).text)
    assert metrics["vllm:generation_tokens_total"] >= 28
    assert metrics["vllm:num_requests_running"] == 0

    # Errors from vLLM pass through with their status, not as a proxy failure.
    bad = httpx.post(f"{base}/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=60)
    assert bad.status_code == 404 and "nope" in bad.text

    # A client that leaves mid-stream frees the engine: vLLM aborts instead of generating 8 x 2000
    # tokens. (One sequence of 1,000 was too short: on an AVX-512 host under load it finished in about
    # two seconds, before the disconnect had crossed Serve's proxy and replica.)
    before = metrics["vllm:generation_tokens_total"]
    n, max_tokens = 8, 2000
    body = {
        "model": SERVED,
        "prompt": "x",
        "max_tokens": max_tokens,
        "n": n,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as response:
        lines = response.iter_lines()
        for _ in range(5):
            next(lines)

    def engine_idle() -> bool:
        return metric_samples(httpx.get(f"{base}/metrics", timeout=30).text)["vllm:num_requests_running"] == 0

    wait_for(engine_idle, timeout=60, interval=0.2, what="vLLM aborted the abandoned stream")
    metrics = metric_samples(httpx.get(f"{base}/metrics", timeout=30).text)
    assert metrics["vllm:generation_tokens_total"] - before < n * max_tokens

    # Stopping the deployment removes its app; the replica's shutdown stops its vLLM server.
    assert len(vllm_children()) == 1
    services.deployment_stop(deployment=deployment, actor=admin_user)
    deployments_reconcile(trigger="test")
    wait_for(lambda: not vllm_children(), timeout=180, interval=1, what="the replica's vLLM server stopped")
