"""The parse stage: OpenAI-style 400s for what cannot be served, and the body as it will be forwarded."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.context import RequestContext
from gateway.stages.parse import parse
from tests.gateway.inproc import config, snapshot, target


def config_for(**kw):
    return config(Path("/nonexistent"), "p:", **kw)


def _ctx(body, kind: str = "chat", **tenant) -> RequestContext:
    ctx = RequestContext(kind)
    ctx.tenant = snapshot(routes={"m": {"targets": [target(1, "http://x/v1")]}}, tenant=tenant).tenants[1]
    ctx.raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return ctx


def _error(reply) -> dict:
    err = orjson.loads(reply.body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


@pytest.mark.parametrize(
    "raw,kind,code,param",
    [
        (b"{not json", "chat", "invalid_json", None),
        (b"[1]", "chat", "invalid_value", None),
        ({"messages": CHAT["messages"]}, "chat", "invalid_value", "model"),
        ({"model": "m", "messages": []}, "chat", "invalid_value", "messages"),
        ({**CHAT, "stream": "yes"}, "chat", "invalid_value", "stream"),
        ({**CHAT, "max_tokens": 0}, "chat", "invalid_value", "max_tokens"),
        ({**CHAT, "n": 17}, "chat", "invalid_value", "n"),
        ({"model": "m", "prompt": {"a": 1}}, "text", "invalid_value", "prompt"),
        ({"model": "m", "input": []}, "embeddings", None, "input"),
        ({"model": "m", "input": 5}, "responses", None, "input"),
    ],
)
def test_what_cannot_be_served_is_a_400_in_the_openai_shape(raw, kind, code, param):
    reply = parse(config_for(), _ctx(raw, kind))
    assert reply.status == 400 and reply.reason == "bad_request"
    err = _error(reply)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    if code:
        assert err["code"] == code


def test_the_tenants_caps_refuse_long_prompts_and_large_limits():
    reply = parse(
        config_for(),
        _ctx({**CHAT, "messages": [{"role": "user", "content": "x" * 300}]}, max_input_tokens=10),
    )
    assert reply.status == 400 and reply.reason == "admission_input"
    assert _error(reply)["code"] == "input_tokens_over_limit" and _error(reply)["param"] == "messages"
    reply = parse(config_for(), _ctx({**CHAT, "max_tokens": 50}, max_output_tokens=20))
    assert reply.reason == "admission_output" and _error(reply)["code"] == "max_tokens_over_limit"


def test_a_body_nested_deeper_than_can_be_forwarded_is_refused_here():
    # orjson reads deeper nesting than it writes (255 levels).
    nested = b'{"a":' * 300 + b"{}" + b"}" * 300
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":' + nested + b"}"
    reply = parse(config_for(), _ctx(raw))
    assert reply.status == 400 and _error(reply)["code"] == "invalid_json"


def test_the_forwarded_body_carries_one_output_limit_and_asks_for_usage():
    ctx = _ctx({**CHAT, "max_tokens": 3, "max_completion_tokens": 9, "stream": True, "n": 2})
    assert parse(config_for(), ctx) is None
    assert ctx.body["max_tokens"] == 9 and "max_completion_tokens" not in ctx.body
    assert ctx.body["stream_options"] == {"include_usage": True}
    assert (ctx.model, ctx.stream, ctx.max_tokens, ctx.choices, ctx.wants_usage) == ("m", True, 9, 2, False)
    assert ctx.prompt_est > 0 and ctx.prompt_bound is None  # the bound needs the route: admission


def test_without_a_limit_the_tenants_cap_or_the_default_is_forwarded():
    ctx = _ctx(dict(CHAT))
    assert parse(config_for(default_max_tokens=16), ctx) is None and ctx.body["max_tokens"] == 16
    ctx = _ctx(dict(CHAT), max_output_tokens=5)
    assert parse(config_for(default_max_tokens=16), ctx) is None and ctx.body["max_tokens"] == 5
    ctx = _ctx({"model": "m", "input": "hi"}, "responses")
    assert parse(config_for(default_max_tokens=16), ctx) is None
    assert ctx.body["max_output_tokens"] == 16 and ctx.wants_usage and ctx.prompt_bound is not None


def test_embeddings_generate_nothing_and_keep_their_longest_token_input():
    ctx = _ctx({"model": "m", "input": [[1, 2, 3], [4]]}, "embeddings")
    assert parse(config_for(), ctx) is None
    assert (ctx.max_tokens, ctx.choices, ctx.stream, ctx.longest_ids) == (0, 1, False, 3)
