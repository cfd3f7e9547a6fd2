"""The gateway in front of simulated deployments on a real (private) Ray Serve cluster."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from billing.models import UsageEvent
from billing.services.keys import api_key_create
from tests.gateway.conftest import publish, route
from tests.support.ray_cluster import ray_cluster  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.ray]


def _app(name: str, slug: str) -> dict:
    return {
        "name": slug,
        "route_prefix": f"/d/{slug}",
        "import_path": "engines.serve_app:build_app",
        "args": {
            "model_name": name,
            "model": "llama-3.1-8b",
            "gpu": "H100",
            "fixed_ttft_ms": 5,
            "fixed_tpot_ms": 2,
        },
    }


@pytest.fixture(scope="module")
def serve_urls(ray_cluster):  # noqa: F811
    ray_cluster.serve_put(ray_cluster.serve_config([_app("sim-llama", "ray-a"), _app("sim-llama", "ray-b")]))
    ray_cluster.wait_app_running("ray-a")
    ray_cluster.wait_app_running("ray-b")
    return {"ray-a": f"{ray_cluster.serve_url}/d/ray-a/v1", "ray-b": f"{ray_cluster.serve_url}/d/ray-b/v1"}


def test_openai_clients_through_gateway_to_ray_serve(gateway, serve_urls, tenant, admin_user):
    _, secret = api_key_create(tenant=tenant, name="ray", actor=admin_user)
    publish(
        gateway,
        route("sim-llama", (11, "ray-a", serve_urls["ray-a"], 1.0), (12, "ray-b", serve_urls["ray-b"], 1.0)),
    )
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    r = c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert r.usage.completion_tokens == 8
    chunks = list(
        c.chat.completions.create(
            model="sim-llama",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage.completion_tokens == 8

    async def many():
        ac = openai.AsyncOpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)

        async def one(i):
            s = await ac.completions.create(model="sim-llama", prompt=f"n{i}", max_tokens=4, stream=True)
            return [ch async for ch in s]

        return await asyncio.gather(*(one(i) for i in range(20)))

    assert all(len(x) >= 4 for x in asyncio.run(many()))
    deadline = time.monotonic() + 10
    while UsageEvent.objects.filter(tenant=tenant).count() < 22 and time.monotonic() < deadline:
        time.sleep(0.1)
    events = UsageEvent.objects.filter(tenant=tenant)
    assert events.count() == 22
    assert set(events.values_list("deployment_slug", flat=True)) == {"ray-a", "ray-b"}
    assert all(e.status == "ok" and e.completion_tokens in (4, 8) for e in events)
