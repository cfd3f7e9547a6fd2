"""The OpenAI surface tenants' SDKs use beyond chat: ``models.retrieve``, ``embeddings.create`` and
``responses.create`` (streaming too), with the official ``openai`` client against a real gateway
process, Redis, Postgres and simulated engines (one generating, one embedding).

Who can do what: a tenant's key holder can call these endpoints for models its tenant may use; it
cannot learn whether a model it may not use exists, cannot get an embedding or a response without the
budget hold that bounds its worst case, and cannot get an unmetered one.
"""

from __future__ import annotations

import math
import os
import sys
from decimal import Decimal

import httpx
import openai
import pytest

from billing.models import UsageEvent
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from tests.gateway.conftest import Proc, free_port, publish, route, wait_http, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

EMBED_CONTEXT = 512


@pytest.fixture(scope="module")
def embed_engine(gw_tmp):
    """A simulated engine answering embeddings for "sim-embed", with a short context."""
    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", "sim-embed", "--model-preset", "llama-3.1-8b",
        "--gpu", "H100", "--port", str(port), "--fixed-ttft-ms", "2", "--fixed-tpot-ms", "1",
        "--max-model-len", str(EMBED_CONTEXT),
    ]  # fmt: skip
    proc = Proc(args, dict(os.environ), gw_tmp / "embed-engine.log")
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc.p, proc.log_path)
    yield f"http://127.0.0.1:{port}/v1"
    proc.stop()


def _routes(engine: str, embed: str, *, restricted_to: int | None = None) -> dict:
    r = route("sim-llama", (1, "sim-a", engine, 1.0))
    e = route("sim-embed", (2, "sim-embed", embed, 1.0))
    e["sim-embed"]["targets"][0].update(task="embed", max_model_len=EMBED_CONTEXT)
    hidden = route("hidden-model", (3, "hidden", engine, 1.0))
    hidden["hidden-model"]["tenant_ids"] = [restricted_to] if restricted_to else None
    return {**r, **e, **hidden}


@pytest.fixture
def env(gateway, engine_a, embed_engine, tenant, other_tenant, admin_user):
    for model, inp, out in (("sim-llama", "2", "6"), ("sim-embed", "0.5", "0"), ("hidden-model", "1", "1")):
        price_set(
            public_model=model,
            input_per_million=Decimal(inp),
            output_per_million=Decimal(out),
            actor=admin_user,
        )
    _, secret = api_key_create(tenant=tenant, name="sdk", actor=admin_user)
    publish(gateway, _routes(engine_a, embed_engine, restricted_to=other_tenant.pk))
    client = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    return {"gateway": gateway, "client": client, "tenant": tenant, "engine": engine_a, "embed": embed_engine}


def _events(gateway: str, n: int) -> list[UsageEvent]:
    wait_shipped(gateway)
    events = list(UsageEvent.objects.order_by("id"))
    assert len(events) == n, events
    return events


# --- GET /v1/models/{id} ----------------------------------------------------------------------------


def test_models_retrieve_answers_for_a_visible_model(env):
    m = env["client"].models.retrieve("sim-llama")
    assert m.id == "sim-llama" and m.object == "model"
    listed = {x.id for x in env["client"].models.list()}
    assert "sim-llama" in listed and "hidden-model" not in listed


def test_models_retrieve_answers_a_forbidden_and_an_unknown_model_alike(env):
    answers = []
    for name in ("hidden-model", "no-such-model"):
        with pytest.raises(openai.NotFoundError) as exc:
            env["client"].models.retrieve(name)
        body = exc.value.body
        answers.append((exc.value.status_code, body["code"], body["message"].replace(name, "X")))
    assert answers[0] == answers[1]
    r = httpx.get(env["gateway"] + "/v1/models/sim-llama", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


# --- POST /v1/embeddings -----------------------------------------------------------------------------


def test_embeddings_are_deterministic_unit_vectors_metered_per_input_token(env):
    client = env["client"]
    a = client.embeddings.create(model="sim-embed", input=["the cat sat", "on the mat"])  # SDK: base64
    b = client.embeddings.create(model="sim-embed", input="the cat sat", encoding_format="float")
    assert [d.index for d in a.data] == [0, 1]
    v0, v1 = a.data[0].embedding, a.data[1].embedding
    assert len(v0) == 256 and math.isclose(math.fsum(x * x for x in v0), 1.0, rel_tol=1e-5)
    assert b.data[0].embedding == pytest.approx(v0, abs=1e-6)  # same text, same vector (float32 in base64)
    assert v0 != pytest.approx(v1, abs=1e-3)
    assert a.model == "sim-embed" and a.usage.prompt_tokens > 0
    events = _events(env["gateway"], 2)
    ev = events[0]
    assert (ev.prompt_tokens, ev.completion_tokens) == (a.usage.prompt_tokens, 0)
    assert ev.cost_nanos == a.usage.prompt_tokens * 500  # $0.5 per million input tokens
    assert ev.price_id is not None and ev.status == "ok"


@pytest.mark.parametrize(
    "bad,code",
    [([], "invalid_value"), ([1.5, 2.5], "invalid_value"), ({"text": "x"}, "invalid_type"), ([""], "invalid_value"),
     (["ok", 3], "invalid_value"), (None, "invalid_type")],
)  # fmt: skip
def test_embeddings_with_wrong_input_are_openai_400s_and_change_nothing(env, bad, code):
    with pytest.raises(openai.BadRequestError) as exc:
        env["client"].embeddings.create(model="sim-embed", input=bad, encoding_format="float")
    assert exc.value.body["param"] == "input" and exc.value.body["code"] == code
    _events(env["gateway"], 0)


def test_embedding_inputs_over_the_context_are_400s(env):
    with pytest.raises(openai.BadRequestError) as exc:  # token ids: counted by the gateway
        env["client"].embeddings.create(
            model="sim-embed", input=[[7] * (EMBED_CONTEXT + 1)], encoding_format="float"
        )
    assert exc.value.body["code"] == "context_length_exceeded"
    _events(env["gateway"], 0)
    with pytest.raises(openai.BadRequestError) as exc:  # text: counted by the engine, its 400 passed on
        env["client"].embeddings.create(model="sim-embed", input="word " * 1000, encoding_format="float")
    assert exc.value.body["code"] == "context_length_exceeded"
    (ev,) = _events(env["gateway"], 1)
    assert ev.cost_nanos == 0 and ev.status == "error"  # refused by the engine: nothing billed


def test_endpoints_go_only_to_deployments_that_serve_them(env):
    client = env["client"]
    with pytest.raises(openai.NotFoundError) as exc:
        client.embeddings.create(model="sim-llama", input="x")
    assert exc.value.body["code"] == "unsupported_endpoint" and "/v1/embeddings" in exc.value.body["message"]
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.create(model="sim-embed", input="x")
    assert exc.value.body["code"] == "unsupported_endpoint" and "/v1/responses" in exc.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="sim-embed", messages=[{"role": "user", "content": "x"}])
    _events(env["gateway"], 0)


def test_embeddings_and_responses_hold_budget_like_chat(env):
    # A hard cap below one request's worst case: the hold refuses it before anything is forwarded,
    # and says that this request alone is larger than what is left (nothing was spent).
    budget_set(
        actor="system:test", tenant=env["tenant"], amount_usd=Decimal("0.000001"), hard_cap_percent=100
    )
    publish(env["gateway"], _routes(env["engine"], env["embed"]))
    with pytest.raises(openai.RateLimitError) as exc:
        env["client"].embeddings.create(model="sim-embed", input="a long enough text " * 20)
    assert exc.value.body["code"] == "worst_case_over_budget"
    with pytest.raises(openai.RateLimitError) as exc:
        env["client"].responses.create(model="sim-llama", input="hello", max_output_tokens=50)
    assert exc.value.body["code"] == "worst_case_over_budget"
    _events(env["gateway"], 0)


# --- POST /v1/responses ------------------------------------------------------------------------------


def test_responses_pass_through_and_are_metered_from_their_usage(env):
    r = env["client"].responses.create(model="sim-llama", input="Tell me a story.", max_output_tokens=7)
    assert r.status == "completed" and r.output_text
    assert r.model == "sim-llama"
    assert r.usage.output_tokens == 7 and r.usage.input_tokens > 0
    (ev,) = _events(env["gateway"], 1)
    assert (ev.prompt_tokens, ev.completion_tokens) == (r.usage.input_tokens, 7)
    assert ev.cost_nanos == r.usage.input_tokens * 2000 + 7 * 6000
    assert not ev.usage_estimated and ev.stream is False


def test_responses_stream_and_are_metered_from_the_final_event(env):
    deltas, final = [], None
    stream = env["client"].responses.create(
        model="sim-llama",
        input=[{"role": "user", "content": "Count to five."}],
        max_output_tokens=5,
        stream=True,
    )
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            final = event.response
    assert final is not None and len(deltas) == 5
    assert final.output_text == "".join(deltas)
    assert final.usage.output_tokens == 5
    (ev,) = _events(env["gateway"], 1)
    assert (ev.prompt_tokens, ev.completion_tokens) == (final.usage.input_tokens, 5)
    assert ev.stream and ev.status == "ok" and not ev.usage_estimated


def test_responses_without_a_limit_get_the_gateways_bound(env):
    r = env["client"].responses.create(model="sim-llama", input="Go on.")
    assert r.max_output_tokens is not None  # the gateway set one, so the hold was bounded
    assert r.usage.output_tokens <= r.max_output_tokens


# --- traffic classes (ADR 0035) ------------------------------------------------------------------


def test_the_sdks_service_tier_lowers_a_requests_class_and_cannot_raise_it(env):
    client = env["client"]
    raw = client.chat.completions.with_raw_response.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=3, service_tier="flex"
    )
    assert raw.headers["x-governor-traffic-class"] == "sheddable" and raw.parse().choices[0].message.content
    with pytest.raises(openai.PermissionDeniedError) as exc:
        client.chat.completions.create(
            model="sim-llama",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            service_tier="priority",
        )
    assert exc.value.body["code"] == "traffic_class_not_allowed"
    stream = client.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert [e.traffic_class for e in _events(env["gateway"], 2)] == ["sheddable", "standard"]
