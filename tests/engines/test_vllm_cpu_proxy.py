"""The ``vllm-cpu`` replica's HTTP proxy (``engines.vllm_serve_app.VllmProxy``) without vLLM installed.

Upstream is a real OpenAI-compatible server process (the simulated engine in fixed-timing mode, which
speaks vLLM's API and metric names); the proxy runs in uvicorn under a Serve-style route prefix.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest
import uvicorn

from engines.vllm_cpu import engine_kwargs_to_args
from engines.vllm_serve_app import VllmProxy, cpu_engine_kwargs
from tests.support.ray_cluster import free_port

PREFIX = "/d/tiny-cpu"
TPOT_MS = 20


def with_route_prefix(app, prefix: str):
    """What Serve's proxy does: keep the full path, announce the route prefix as ``root_path``."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            scope = {**scope, "root_path": prefix}
        await app(scope, receive, send)

    return wrapped


@pytest.fixture(scope="module")
def upstream(start_server):
    return start_server("--fixed-ttft-ms", "50", "--fixed-tpot-ms", str(TPOT_MS))


@pytest.fixture(scope="module")
def proxy_url(upstream):
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            with_route_prefix(VllmProxy(upstream.base), PREFIX),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}{PREFIX}"
    server.should_exit = True
    thread.join(10)


def test_chat_stream_arrives_chunk_by_chunk_with_usage(proxy_url):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="unused")
    arrivals = []
    last = None
    for chunk in client.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
        last = chunk
    assert len(arrivals) == 10
    # 9 gaps of ~20 ms: a buffering proxy would deliver them all at once.
    assert arrivals[-1] - arrivals[0] >= 9 * TPOT_MS / 1000 * 0.6
    assert last.usage is not None and last.usage.completion_tokens == 10


def test_paths_statuses_and_bodies_pass_through(proxy_url, upstream):
    assert httpx.get(f"{proxy_url}/health", timeout=10).status_code == 200
    models = httpx.get(f"{proxy_url}/v1/models", timeout=10)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "sim"
    assert "vllm:num_requests_running" in httpx.get(f"{proxy_url}/metrics", timeout=10).text
    body = {"model": "not-served", "prompt": "x", "max_tokens": 2}
    direct = httpx.post(f"{upstream.base}/v1/completions", json=body, timeout=10)
    proxied = httpx.post(f"{proxy_url}/v1/completions", json=body, timeout=10)
    assert proxied.status_code == direct.status_code >= 400
    assert proxied.json() == direct.json()


def test_client_disconnect_aborts_the_upstream_request(proxy_url, upstream):
    body = {"model": "sim", "prompt": "x", "max_tokens": 500, "stream": True}
    with httpx.stream("POST", f"{proxy_url}/v1/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert upstream.metrics()["vllm:num_requests_running"] == 1
    deadline = time.monotonic() + 5
    while upstream.metrics()["vllm:num_requests_running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.metrics()["vllm:num_requests_running"] == 0  # 500 tokens would take 10 s


def test_unreachable_upstream_is_a_503_in_openai_error_shape():
    app = VllmProxy(f"http://127.0.0.1:{free_port()}")

    async def call():
        transport = httpx.ASGITransport(app=with_route_prefix(app, PREFIX))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return await client.get(f"{PREFIX}/v1/models")

    response = asyncio.run(call())
    assert response.status_code == 503
    assert "unreachable" in response.json()["error"]["message"]


def test_engine_arguments_are_adapted_to_the_cpu_backend():
    kwargs = cpu_engine_kwargs(
        {"gpu_memory_utilization": 0.9, "block_size": 16, "max_num_seqs": 8, "enable_prefix_caching": False}
    )
    assert kwargs == {"block_size": 32, "max_num_seqs": 8, "enable_prefix_caching": False}
    assert engine_kwargs_to_args({**kwargs, "enforce_eager": True, "max_model_len": None}) == [
        "--block-size",
        "32",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
        "--enforce-eager",
    ]
