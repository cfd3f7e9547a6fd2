"""Property-based fuzzing of the gateway: generated bodies, headers and parameters never get a 5xx;
a refusal is an OpenAI-style 4xx with a request id, and leaves nothing metered or held."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.services.budgets import budget_set
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from tests.gateway.conftest import PREFIX, REDIS_URL, health, publish, route, start_fake

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

MODEL = "sim-llama"
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
content = st.one_of(
    st.text(max_size=200),
    st.none(),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=50)}),
            st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_audio", "x"])}),
            json_values,
        ),
        max_size=3,
    ),
    json_values,
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": content},
        optional={
            "name": st.one_of(st.text(max_size=20), json_values),
            "tool_calls": json_values,
            "tool_call_id": json_values,
        },
    ),
    json_values,
)
params = {
    "model": st.one_of(st.just(MODEL), st.just("no-such-model"), json_values),
    "max_tokens": st.one_of(st.integers(-5, 40), st.integers(2**31, 2**64), json_values),
    "max_completion_tokens": st.one_of(st.integers(-5, 40), json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "stream_options": st.one_of(
        st.fixed_dictionaries({"include_usage": st.one_of(st.booleans(), json_values)}), json_values
    ),
    "n": st.one_of(st.integers(-2, 20), json_values),
    "temperature": st.one_of(st.floats(-5, 5, allow_nan=False), json_values),
    "top_p": json_values,
    "stop": st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=3), json_values),
    "user": st.one_of(st.text(max_size=20), json_values),
    "tools": st.one_of(st.lists(json_values, max_size=3), json_values),
    "response_format": json_values,
    "seed": json_values,
    # Voting (docs/voting.md): the Governor field, well-formed or not.
    "governor": st.one_of(st.fixed_dictionaries({"vote": json_values}), json_values),
}
chat_body = st.fixed_dictionaries(
    {"model": params["model"], "messages": st.lists(message, min_size=0, max_size=4)},
    optional={k: v for k, v in params.items() if k != "model"},
)
text_body = st.fixed_dictionaries(
    {"model": params["model"]},
    optional={
        **{k: v for k, v in params.items() if k != "model"},
        "prompt": st.one_of(
            st.text(max_size=100),
            st.lists(st.one_of(st.text(max_size=20), st.integers(0, 50000))),
            json_values,
        ),
    },
)
# Well-formed requests with valid and odd-but-legal optional parameters: the admitted side.
valid_chat = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.just("user"), "content": st.text(min_size=1, max_size=80)}),
            min_size=1,
            max_size=3,
        ),
    },
    optional={
        "max_tokens": st.integers(1, 8),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "temperature": st.floats(0, 2),
        "tools": st.lists(json_values, max_size=3),
        "response_format": json_values,
        "user": st.text(max_size=20),
        "metadata": json_values,
    },
)
valid_text = st.fixed_dictionaries(
    {"model": st.just(MODEL), "prompt": st.text(min_size=1, max_size=80)},
    optional={"max_tokens": st.integers(1, 8), "stream": st.booleans(), "echo": json_values},
)
raw_body = st.one_of(
    st.binary(max_size=300), st.just(b""), st.just(b"null"), st.just(b"[]"), st.just(b'{"model":')
)
header_name = st.from_regex(r"\Ax-[a-z0-9-]{1,20}\Z")
header_value = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=200)
auth = st.sampled_from(["valid"] * 5 + ["missing", "garbage", "no-bearer", "basic"])


@pytest.fixture
def fuzz_env(gateway, gw_tmp, tenant, admin_user):
    proc, url = start_fake(gw_tmp, name="fuzz-backend", tokens=4, tpot_ms=0)
    price_set(
        public_model=MODEL, input_per_million=Decimal("1"), output_per_million=Decimal("2"), actor=admin_user
    )
    budget_set(
        actor="system:test", tenant=tenant, amount_usd=Decimal("1000"), hard_cap_percent=100
    )  # holds are taken
    _, secret = api_key_create(tenant=tenant, name="fuzz", actor=admin_user)
    publish(gateway, route(MODEL, (1, "fuzz", url, 1.0)))
    yield gateway, secret, tenant
    proc.stop()


def _budget_state(r: redis.Redis, tenant_id: int) -> tuple[int, int]:
    held = spent = 0
    for k in r.keys(f"{PREFIX}budget:{tenant_id}:*"):
        h = r.hgetall(k)
        held += int(h.get(b"held", 0))
        spent += int(h.get(b"spent", 0))
    return held, spent


def test_generated_requests_never_get_a_5xx_and_refusals_meter_nothing(fuzz_env):
    gw, secret, tenant = fuzz_env
    r = redis.Redis.from_url(REDIS_URL)
    http = httpx.Client(base_url=gw, timeout=60)
    statuses: list[int] = []

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        kind_body=st.one_of(
            st.tuples(st.just("/v1/chat/completions"), st.one_of(valid_chat, chat_body, text_body, raw_body)),
            st.tuples(st.just("/v1/completions"), st.one_of(valid_text, text_body, chat_body, raw_body)),
        ),
        extra_headers=st.dictionaries(header_name, header_value, max_size=4),
        who=auth,
        query=st.one_of(
            st.just(""), st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40)
        ),
    )
    def check(kind_body, extra_headers, who, query):
        path, body = kind_body
        headers = dict(extra_headers)
        headers["content-type"] = "application/json"
        if who == "valid":
            headers["authorization"] = f"Bearer {secret}"
        elif who == "garbage":
            headers["authorization"] = "Bearer gov-" + "z" * 40
        elif who == "no-bearer":
            headers["authorization"] = secret
        elif who == "basic":
            headers["authorization"] = "Basic dXNlcjpwYXNz"
        # The stdlib encoder: integers past 64 bits and infinities are fair game too.
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        before_events = health(gw)["spool_events"]
        _, spent_before = _budget_state(r, tenant.pk)
        url = path + ("?" + httpx.QueryParams({"q": query}).__str__() if query else "")
        resp = http.post(url, content=raw, headers=headers)
        text = resp.read()
        statuses.append(resp.status_code)
        assert resp.status_code < 500, (resp.status_code, raw[:300], text[:300])
        assert resp.headers.get("x-request-id")
        held, spent_after = _budget_state(r, tenant.pk)
        assert held == 0, "a hold outlived its request"
        after_events = health(gw)["spool_events"]
        if resp.status_code == 200:
            assert after_events == before_events + 1  # metered exactly once
            if resp.headers["content-type"].startswith("text/event-stream"):
                assert text.rstrip().endswith(b"data: [DONE]")
            else:
                assert orjson.loads(text)["choices"]
        else:
            err = orjson.loads(text)["error"]
            assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)
            if resp.status_code < 500 and err["type"] != "upstream_error":
                # Refused by the gateway: nothing spooled, nothing spent.
                assert after_events == before_events, err
                assert spent_after == spent_before, err

    try:
        check()
    finally:
        http.close()
    # Both sides were exercised: admitted requests and refusals of several kinds.
    assert {200, 400, 401} <= set(statuses), sorted(set(statuses))
