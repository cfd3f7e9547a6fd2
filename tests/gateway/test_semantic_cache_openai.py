"""The semantic cache through a real gateway process with the official ``openai`` client: a route
with the cache on, a simulated engine answering it and another embedding the prompts (the light
encoder), Redis, and Postgres the usage events are shipped to.

A tenant's repeated question is answered from the cache once the cache has learned that its entry is
safe to serve: the SDK reads the same answer, whole or streamed in the model's chunk shape with its
usage chunk; the usage event says it was a cache hit, billed at the cache price an admin published,
with what the model would have cost beyond it; another tenant's first asking goes to the model.
"""

from __future__ import annotations

import os
import sys
from decimal import Decimal

import openai
import pytest

from billing.models import UsageEvent
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from tests.gateway.conftest import Proc, free_port, publish, route, wait_http, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def embed_engine(gw_tmp):
    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", "sim-embed", "--model-preset", "llama-3.1-8b",
        "--gpu", "H100", "--port", str(port), "--fixed-ttft-ms", "1", "--fixed-tpot-ms", "1",
    ]  # fmt: skip
    proc = Proc(args, dict(os.environ), gw_tmp / "cache-embed-engine.log")
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc.p, proc.log_path)
    yield f"http://127.0.0.1:{port}/v1"
    proc.stop()


@pytest.fixture
def env(gateway, engine_a, embed_engine, tenant, other_tenant, admin_user):
    price_set(public_model="sim-llama", input_per_million=Decimal("2"), output_per_million=Decimal("6"),
              actor=admin_user)  # fmt: skip
    cache_price = price_set(public_model="sim-llama", input_per_million=Decimal("0.2"),
                            output_per_million=Decimal("0.6"), actor=admin_user, kind="cache")  # fmt: skip
    routes = {
        **route("sim-llama", (1, "sim-a", engine_a, 1.0)),
        **route("sim-embed", (2, "sim-embed", embed_engine, 1.0)),
    }
    routes["sim-llama"]["targets"][0]["version_id"] = 41
    routes["sim-llama"]["cache"] = {"ttl_s": 600, "target_error": 0.1, "verify_share": 0.05,
                                    "embedding_model": "sim-embed", "generation": 0}  # fmt: skip
    routes["sim-embed"]["targets"][0].update(task="embed", version_id=42)
    _, secret = api_key_create(tenant=tenant, name="sdk", actor=admin_user)
    _, other = api_key_create(tenant=other_tenant, name="sdk", actor=admin_user)
    publish(gateway, routes)
    return {
        "gateway": gateway,
        "client": openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0),
        "other": openai.OpenAI(base_url=gateway + "/v1", api_key=other, max_retries=0),
        "cache_price": cache_price,
    }


QUESTION = [{"role": "user", "content": "What is the capital city of Austria?"}]


def _until_hit(create, tries: int = 150):
    """Ask until the gateway says the cache answered; (the hit, the answers before it)."""
    before = []
    for _ in range(tries):
        raw = create()
        if raw.headers.get("x-governor-cache") == "hit":
            return raw, before
        before.append(raw)
    raise AssertionError(f"no cache hit in {tries} requests")


def test_a_repeated_question_is_a_metered_cache_hit_whole_and_streamed(env):
    client = env["client"]

    def ask():
        return client.chat.completions.with_raw_response.create(
            model="sim-llama", messages=QUESTION, max_tokens=12
        )

    hit, before = _until_hit(ask)
    model_answer = before[0].parse()
    answer = hit.parse()
    assert answer.choices[0].message.content == model_answer.choices[0].message.content
    assert answer.choices[0].finish_reason == model_answer.choices[0].finish_reason
    assert (
        answer.model == "sim-llama" and answer.usage.completion_tokens == model_answer.usage.completion_tokens
    )

    def ask_streamed():
        return client.chat.completions.with_raw_response.create(
            model="sim-llama",
            messages=QUESTION,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )

    shit, _ = _until_hit(ask_streamed)
    chunks = list(shit.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == model_answer.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == model_answer.choices[
        0
    ].finish_reason
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.completion_tokens == model_answer.usage.completion_tokens
    )

    wait_shipped(env["gateway"])
    hits = list(UsageEvent.objects.filter(cache_hit=True).order_by("id"))
    assert len(hits) == 2 and all(h.deployment_id is None and h.status == "ok" for h in hits)
    price = env["cache_price"]
    for h in hits:
        assert h.price_id == price.pk
        assert h.cost_nanos == h.prompt_tokens * price.input_nanos + h.completion_tokens * price.output_nanos
        assert h.saved_nanos == h.prompt_tokens * 2000 + h.completion_tokens * 6000 - h.cost_nanos > 0
    assert not UsageEvent.objects.filter(cache_hit=False, saved_nanos__gt=0).exists()

    # Another tenant asking the same: its own scope, so its first asking goes to the model.
    other = env["other"].chat.completions.with_raw_response.create(
        model="sim-llama", messages=QUESTION, max_tokens=12
    )
    assert other.headers.get("x-governor-cache") is None
    assert other.headers.get("x-governor-deployment") == "sim-a"
