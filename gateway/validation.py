"""Request validation and prompt-size estimation, kept apart from the forwarding loop.

Only what the gateway relies on is checked (types of the fields it reads, sizes it must hold
budget for); every other OpenAI parameter passes through for the engine to judge.
"""

from __future__ import annotations


class BadRequest(Exception):
    """A client error to answer in OpenAI's shape."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _text_bytes(content) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        n = 0
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    n += len(text.encode())
                elif part.get("type") not in (None, "text"):
                    n += 1024  # images/audio: a flat, generous allowance
            elif isinstance(part, str):
                n += len(part.encode())
        return n
    raise BadRequest("message content must be a string, an array of content parts or null", param="messages")


def estimate_prompt_tokens(kind: str, body: dict) -> int:
    """An upper-leaning estimate of prompt tokens, without a tokenizer.

    Byte-level BPE tokenizers average ~4 bytes per token on English and ~3 on code or CJK; we divide
    by 3 so the budget hold and the admission cap lean towards over-estimating (the hold is
    settled to the engine's real count afterwards), plus a few tokens per chat message for the
    template's role markers.
    """
    if kind == "chat":
        total = 3
        for m in body["messages"]:
            total += 4 + (_text_bytes(m.get("content")) + 2) // 3
            name = m.get("name")
            if isinstance(name, str):
                total += 1 + len(name) // 3
        return total
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return 1 + (len(prompt.encode()) + 2) // 3
    total = 1
    for p in prompt:
        if isinstance(p, str):
            total += 1 + (len(p.encode()) + 2) // 3
        elif _is_int(p):
            total += 1
        elif isinstance(p, list):
            total += len(p)
    return total


def validate(kind: str, body, *, absurd_max_tokens: int) -> tuple[str, bool, int | None, int, bool]:
    """Check the fields we use; returns (model, stream, max_tokens or None, n, client_wants_usage)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string", param="model")
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty array", param="messages")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest("each message must be an object with a string 'role'", param="messages")
            _text_bytes(m.get("content"))
    else:
        prompt = body.get("prompt")
        ok = isinstance(prompt, str) or (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(p, (str, list)) or _is_int(p) for p in prompt)
        )
        if not ok:
            raise BadRequest("'prompt' must be a string or an array of strings or token ids", param="prompt")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    wants_usage = False
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise BadRequest("'stream_options' must be an object", param="stream_options")
        iu = so.get("include_usage", False)
        if not isinstance(iu, bool):
            raise BadRequest("'stream_options.include_usage' must be a boolean", param="stream_options")
        wants_usage = iu
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if v is None:
            continue
        if not _is_int(v):
            raise BadRequest(f"'{name}' must be an integer", param=name)
        if v < 1:
            raise BadRequest(f"'{name}' must be at least 1", param=name)
        if v > absurd_max_tokens:
            raise BadRequest(f"'{name}' is larger than any model here can produce", param=name)
        max_tokens = v if max_tokens is None else min(max_tokens, v)
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not _is_int(n) or n < 1 or n > 16:
        raise BadRequest("'n' must be an integer between 1 and 16", param="n")
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        v = body.get(name)
        if v is not None and not _is_num(v):
            raise BadRequest(f"'{name}' must be a number", param=name)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise BadRequest("'user' must be a string", param="user")
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise BadRequest("'stop' must be a string or an array of strings", param="stop")
    return model, stream, max_tokens, n, wants_usage
