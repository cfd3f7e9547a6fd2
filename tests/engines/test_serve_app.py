"""The simulated engine as a Ray Serve application on a real, private Ray cluster."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.support.ray_cluster import ray_cluster  # noqa: F401  (module-scoped fixture)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = {
    "name": "sim-llama",
    "route_prefix": "/d/sim-llama",
    "import_path": "engines.serve_app:build_app",
    "args": {
        "model_name": "acme-llama-8b",
        "model": {
            "name": "Llama-3.1-8B",
            "params": 8.03e9,
            "layers": 32,
            "hidden_size": 4096,
            "attention_heads": 32,
            "kv_heads": 8,
            "head_dim": 128,
            "vocab_size": 128256,
            "max_context": 131072,
            "precision": "bf16",
            "kv_cache_dtype": "auto",
        },
        "gpu": {
            "name": "H100",
            "memory_gib": 80,
            "hbm_bandwidth_gbps": 3350,
            "bf16_tflops": 989,
            "fp8_tflops": 1979,
        },
        "tensor_parallel": 1,
        "engine": {
            "max_num_seqs": 64,
            "max_num_batched_tokens": 8192,
            "block_size": 16,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "max_model_len": 8192,
        },
        "efficiency": {"mfu": 0.6, "mbu": 0.78, "step_overhead_s": 0.0006},
        "time_scale": 2.0,
        "seed": 0,
    },
}


def test_serve_app_answers_openai_streaming_under_its_route_prefix(ray_cluster):  # noqa: F811
    ray_cluster.serve_put(ray_cluster.serve_config([APP]))
    status = ray_cluster.wait_app_running("sim-llama")
    assert status["deployments"]["SimulatedVLLM"]["status"] == "HEALTHY"

    base = f"{ray_cluster.serve_url}/d/sim-llama/v1"
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["acme-llama-8b"]
    chunks = list(
        client.chat.completions.create(
            model="acme-llama-8b",
            messages=[{"role": "user", "content": "Why is decode memory-bound?"}],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    content = [c for c in chunks if c.choices]
    assert len(content) == 24
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 24

    r = client.completions.create(model="acme-llama-8b", prompt="hello", max_tokens=5)
    assert r.usage.completion_tokens == 5

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])

    metrics = httpx.get(f"{ray_cluster.serve_url}/d/sim-llama/metrics", timeout=10).text
    assert 'vllm:generation_tokens_total{model_name="acme-llama-8b"} 29' in metrics
    assert httpx.get(f"{ray_cluster.serve_url}/d/sim-llama/health", timeout=10).status_code == 200


def test_serve_streams_incrementally_and_a_disconnect_frees_the_engine(ray_cluster):  # noqa: F811
    ray_cluster.serve_put(ray_cluster.serve_config([APP]))
    ray_cluster.wait_app_running("sim-llama")
    base = f"{ray_cluster.serve_url}/d/sim-llama"

    def metric(name: str) -> float:
        for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(name)

    with httpx.Client(timeout=30) as http, http.stream(
        "POST", f"{base}/v1/chat/completions",
        json={"model": "acme-llama-8b", "messages": [{"role": "user", "content": "go"}], "max_tokens": 3000,
              "stream": True},
    ) as resp:  # fmt: skip
        got = 0
        running = kv = 0.0
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                got += 1
                if got == 3:
                    # 3000 tokens take ~10 s at time_scale 2: chunks arrive while it is still running.
                    running = metric("vllm:num_requests_running")
                    kv = metric("vllm:kv_cache_usage_perc")
                    break
    assert running == 1 and kv > 0
    deadline = time.monotonic() + 30
    while metric("vllm:num_requests_running") != 0 or metric("vllm:kv_cache_usage_perc") != 0:
        assert time.monotonic() < deadline, "the aborted stream still holds the engine"
        time.sleep(0.2)
