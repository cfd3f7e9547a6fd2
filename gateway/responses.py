"""``POST /v1/responses``: passed through to engines that serve OpenAI's Responses API (vLLM's does).

The gateway checks what it relies on (model, input, stream, ``max_output_tokens``) and bounds the
worst case for the budget hold exactly as for chat: every byte of the request's JSON may be a token,
plus the template's own text, and ``max_output_tokens`` (set to the gateway's default when the client
gives none, so the hold is bounded). Usage is metered from the response's ``usage``
(``input_tokens``/``output_tokens``), on the final ``response.completed`` event when streaming.
"""

from __future__ import annotations

from gateway.validation import TEMPLATE_FIXED, TEMPLATE_PER_MESSAGE, BadRequest, _text_bytes

# Events that end a Responses stream (there is no ``[DONE]``); their ``response.usage`` is what bills.
FINAL_EVENTS = (b"response.completed", b"response.incomplete", b"response.failed")


def _input_items(inp) -> list:
    if isinstance(inp, str) and inp:
        return [{"role": "user", "content": inp}]
    if isinstance(inp, list) and inp and all(isinstance(x, dict) for x in inp):
        return inp
    raise BadRequest("'input' must be a non-empty string or an array of input items", param="input")


def validate_responses(
    body, raw_size: int, *, absurd_max_tokens: int
) -> tuple[str, bool, int | None, int, int]:
    """Returns (model, stream, max_output_tokens or None, typical prompt tokens, prompt token bound)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string", param="model")
    items = _input_items(body.get("input"))
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise BadRequest("'max_output_tokens' must be an integer", param="max_output_tokens")
        if max_tokens < 1:
            raise BadRequest("'max_output_tokens' must be at least 1", param="max_output_tokens")
        if max_tokens > absurd_max_tokens:
            raise BadRequest(
                "'max_output_tokens' is larger than any model here can produce", param="max_output_tokens"
            )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string", param="instructions")
    text = len((instructions or "").encode())
    for item in items:
        try:
            text += _text_bytes(item.get("content"))
        except BadRequest as exc:
            raise BadRequest(exc.message, param="input") from exc
    est = 3 + (text + 2) // 3 + 4 * len(items)
    bound = raw_size + TEMPLATE_FIXED + TEMPLATE_PER_MESSAGE * (len(items) + 1)
    return model, stream, max_tokens, est, bound


def responses_usage(usage: dict) -> dict:
    """The Responses API's usage in the chat shape the metering reads."""
    details = usage.get("input_tokens_details") or {}
    return {
        "prompt_tokens": usage.get("input_tokens") or 0,
        "completion_tokens": usage.get("output_tokens") or 0,
        "prompt_tokens_details": {"cached_tokens": details.get("cached_tokens") or 0}
        if isinstance(details, dict)
        else {},
    }
