"""The output limit the gateway holds for is the one the engine applies, and the only one it forwards.

The reference for which field wins is vLLM's own request models (installed with the ``vllm`` extra):
``ChatCompletionRequest`` takes ``max_completion_tokens`` when set, else ``max_tokens``;
``CompletionRequest`` has only ``max_tokens``."""

from __future__ import annotations

import orjson
import pytest

from gateway.validation import (
    BadRequest,
    choices_per_request,
    ensure_serialisable,
    normalise_output_limit,
    prompt_token_bound,
    validate,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "m", "prompt": "hi"}


def _limit(kind: str, body: dict) -> int | None:
    return validate(kind, body, absurd_max_tokens=1_000_000)[2]


@pytest.mark.parametrize(
    ("kind", "fields", "expected"),
    [
        ("chat", {"max_tokens": 4, "max_completion_tokens": 2048}, 2048),
        ("chat", {"max_tokens": 2048, "max_completion_tokens": 4}, 4),
        ("chat", {"max_tokens": 7}, 7),
        ("chat", {"max_completion_tokens": 9}, 9),
        ("chat", {"max_tokens": 5, "max_completion_tokens": None}, 5),
        ("text", {"max_tokens": 2048, "max_completion_tokens": 4}, 2048),
        ("text", {"max_tokens": 4, "max_completion_tokens": 2048}, 4),
        ("text", {"max_completion_tokens": 9}, 9),
        ("chat", {}, None),
        ("text", {}, None),
    ],
)
def test_the_limit_is_the_engines_and_only_it_is_forwarded(kind, fields, expected):
    body = {**(CHAT if kind == "chat" else TEXT), **fields}
    limit = _limit(kind, body)
    assert limit == expected
    normalise_output_limit(body, limit or 16)
    assert body["max_tokens"] == (limit or 16)
    assert "max_completion_tokens" not in body


@pytest.mark.vllm
def test_vllms_request_models_apply_the_same_limit():
    """What vLLM itself would generate for the bodies above, from its own pydantic models."""
    chat_protocol = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")

    def vllm_chat_limit(body):
        req = chat_protocol.ChatCompletionRequest.model_validate(body)
        return req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens

    for fields in (
        {"max_tokens": 4, "max_completion_tokens": 2048},
        {"max_tokens": 2048, "max_completion_tokens": 4},
    ):
        body = {**CHAT, **fields}
        assert _limit("chat", body) == vllm_chat_limit(body)
    completion_protocol = pytest.importorskip("vllm.entrypoints.openai.completion.protocol")
    body = {**TEXT, "max_tokens": 2048, "max_completion_tokens": 4}
    assert _limit("text", body) == completion_protocol.CompletionRequest.model_validate(body).max_tokens
    # And after normalising, vLLM reads exactly the limit that was held for.
    normalise_output_limit(body, 2048)
    assert completion_protocol.CompletionRequest.model_validate(body).max_tokens == 2048
    chat = {**CHAT, "max_tokens": 4, "max_completion_tokens": 2048}
    normalise_output_limit(chat, _limit("chat", chat))
    assert vllm_chat_limit(chat) == 2048


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("kind", ["chat", "text"])
def test_every_length_field_is_validated_on_both_endpoints(kind, name):
    body = {**(CHAT if kind == "chat" else TEXT), name: "many"}
    with pytest.raises(BadRequest) as exc:
        _limit(kind, body)
    assert exc.value.param == name


def test_every_choice_and_every_prompt_of_a_batch_is_held_for():
    assert choices_per_request("chat", {**CHAT, "n": 3}, 3) == 3
    assert choices_per_request("chat", {**CHAT, "n": 2, "best_of": 5}, 2) == 5
    # A batch of prompts on /v1/completions generates for each prompt.
    assert choices_per_request("text", {"prompt": ["a", "b", "c"]}, 2) == 6
    assert choices_per_request("text", {"prompt": [[1, 2], [3]]}, 1) == 2
    # An array of token ids is one prompt.
    assert choices_per_request("text", {"prompt": [1, 2, 3]}, 1) == 1
    with pytest.raises(BadRequest):
        validate("chat", {**CHAT, "best_of": 100}, absurd_max_tokens=1_000_000)


def test_images_are_held_at_the_routes_bound():
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            }
        ],
    }
    raw = len(orjson.dumps(body))
    small = prompt_token_bound("chat", body, raw, tokens_per_image=1000)
    large = prompt_token_bound("chat", body, raw, tokens_per_image=16_384)
    assert large - small == 2 * (16_384 - 1000)


def deep_body(depth: int, model: str = "m") -> bytes:
    """A chat body with a ``metadata`` array nested ``depth`` levels."""
    return b'{"model":%s,"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"metadata":%s1%s}' % (
        orjson.dumps(model),
        b"[" * depth,
        b"]" * depth,
    )


def test_a_body_that_cannot_be_forwarded_is_refused():
    raw = deep_body(300)
    # orjson reads it (the gateway parses it), but cannot write it back out to forward it.
    body = orjson.loads(raw)
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(body)
    with pytest.raises(BadRequest) as exc:
        ensure_serialisable(body)
    assert exc.value.status == 400 and exc.value.code == "invalid_json"
    ensure_serialisable(orjson.loads(deep_body(200)))
