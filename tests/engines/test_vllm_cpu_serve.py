"""The ``vllm-cpu`` engine kind: real vLLM on CPU behind Ray Serve, on a real private Ray cluster.

The app config has the shape the deployments compiler writes (golden ``vllm_cpu_tiny``), GPU-only
engine arguments included, so this also proves the builder adapts them to the CPU backend.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import openai
import pytest

from engines.tiny_model import ensure_tiny_model
from tests.engines.test_vllm_cpu import metric_samples, require_vllm
from tests.support.ray_cluster import ray_cluster  # noqa: F401  (module-scoped fixture)

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Unique per run: the test finds its replica's vLLM child by this name in /proc.
MODEL_NAME = f"tiny-serve-{os.getpid()}"
SLUG = "tiny-cpu"


def app_config(model: Path) -> dict:
    """One Serve application as ``deployments.compiler`` compiles a ``vllm-cpu`` deployment."""
    return {
        "name": SLUG,
        "route_prefix": f"/d/{SLUG}",
        "import_path": "engines.vllm_serve_app:build_app",
        "args": {
            "model_name": MODEL_NAME,
            "model_source": str(model),
            "engine": {
                "block_size": 16,
                "enable_chunked_prefill": True,
                "enable_prefix_caching": True,
                "gpu_memory_utilization": 0.9,
                "max_model_len": 2048,
                "max_num_batched_tokens": 2048,
                "max_num_seqs": 8,
            },
        },
        "deployments": [{"name": "VLLMCPUEngine", "num_replicas": 1}],
    }


def vllm_children() -> list[int]:
    """PIDs of vLLM API servers started for this test's model name."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"-m" in cmdline[:3]
            and b"vllm.entrypoints.openai.api_server" in cmdline[:3]
            and MODEL_NAME.encode() in cmdline
        ):
            pids.append(int(entry))
    return pids


@pytest.mark.timeout(1800)
def test_serve_app_streams_completions_metrics_and_cleans_up(ray_cluster):  # noqa: F811
    require_vllm()
    model = ensure_tiny_model(ROOT / "var/models/tiny-llama")
    started = time.monotonic()
    ray_cluster.serve_put(ray_cluster.serve_config([app_config(model)]))
    ray_cluster.wait_app_running(SLUG, timeout=1200)
    print(f"vllm-cpu app RUNNING after {time.monotonic() - started:.1f} s")
    base = f"{ray_cluster.serve_url}/d/{SLUG}"
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=300)

    assert [m.id for m in client.models.list().data] == [MODEL_NAME]
    done = client.completions.create(
        model=MODEL_NAME, prompt="The gateway streams", max_tokens=16, extra_body={"ignore_eos": True}
    )
    assert done.usage.completion_tokens == 16 and done.choices[0].text

    chunks = list(
        client.chat.completions.create(
            model=MODEL_NAME,
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
        "model": MODEL_NAME,
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
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metrics = metric_samples(httpx.get(f"{base}/metrics", timeout=30).text)
        if metrics["vllm:num_requests_running"] == 0:
            break
        time.sleep(0.2)
    assert metrics["vllm:num_requests_running"] == 0
    time.sleep(1)
    metrics = metric_samples(httpx.get(f"{base}/metrics", timeout=30).text)
    assert metrics["vllm:generation_tokens_total"] - before < n * max_tokens

    assert len(vllm_children()) == 1
    ray_cluster.serve_put(ray_cluster.serve_config([]))  # apps left out are deleted
    deadline = time.monotonic() + 120
    while vllm_children() and time.monotonic() < deadline:
        time.sleep(1)
    assert vllm_children() == []  # the replica's shutdown stopped its vLLM server
