"""Request validation and prompt-size estimation, kept apart from the forwarding loop.

Only what the gateway relies on is checked (types of the fields it reads, sizes it must hold
budget for); every other OpenAI parameter passes through for the engine to judge.
"""

from __future__ import annotations

import orjson

from snapshot.contract import DEFAULT_TOKENS_PER_IMAGE


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
                    n += 1024  # images/audio: a typical-case allowance (the hold uses the route's bound)
            elif isinstance(part, str):
                n += len(part.encode())
        return n
    raise BadRequest("message content must be a string, an array of content parts or null", param="messages")


# Fields besides ``messages``/``prompt`` that a chat template renders into the prompt (and the
# engine counts): tool and function definitions, structured-output schemas.
RENDERED_FIELDS = ("tools", "functions", "response_format", "tool_choice", "guided_json")
# Per-message, per-tool and fixed template text, in tokens; generous next to Llama 3.x (role
# headers ~5 per message; ~25 for the date lines of its default system prompt; ~100 of tool-use
# instructions), Qwen 2.5 (~20 default system prompt; ~100 of tool instructions) and Mistral.
TEMPLATE_PER_MESSAGE = 16
TEMPLATE_PER_TOOL = 32
TEMPLATE_FIXED = 64
TEMPLATE_TOOLS_PREAMBLE = 256

# The fields that bound how many tokens one choice may generate, per endpoint, in the order the engine
# honours them: vLLM's chat endpoint takes ``max_completion_tokens`` when it is set, else
# ``max_tokens``; its completions endpoint has only ``max_tokens`` (``max_completion_tokens`` is
# accepted here as the client's intent). The gateway forwards the one it chose as ``max_tokens``
# (which every vLLM version honours on both endpoints) and strips the other, so the engine cannot
# pick a larger one than was held for.
LENGTH_FIELDS = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "text": ("max_tokens", "max_completion_tokens"),
}
FORWARDED_LENGTH_FIELD = "max_tokens"


def _json_bytes(v) -> bytes:
    try:
        return orjson.dumps(v)
    except TypeError:
        return b""


def _media_parts(body: dict) -> int:
    n = 0
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            n += sum(1 for p in content if isinstance(p, dict) and p.get("type") not in (None, "text"))
    return n


def _rendered_extras(body: dict) -> tuple[int, int, int]:
    """(bytes, structural characters, tools) of the non-message fields a template renders."""
    size = structural = tools = 0
    for name in RENDERED_FIELDS:
        v = body.get(name)
        if v is None:
            continue
        raw = _json_bytes(v)
        size += len(raw)
        structural += raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")
        if isinstance(v, list):
            tools += len(v)
    return size, structural, tools


def estimate_prompt_tokens(kind: str, body: dict) -> int:
    """A typical-case estimate of prompt tokens, without a tokenizer (routing, input limits, and
    the billed count when an engine reports no usage).

    Byte-level BPE tokenizers average ~4 bytes per token on English and ~3 on code or CJK; we divide
    by 3 so it leans towards over-estimating, over everything the chat template renders: message
    text, names, tool calls and their arguments, tool definitions and response formats, plus the
    template's role markers. The budget hold uses ``prompt_token_bound`` instead, which is a hard
    upper bound.
    """
    extra_bytes, _, tools = _rendered_extras(body)
    if kind == "chat":
        total = 3 + (extra_bytes + 2) // 3 + 8 * tools
        for m in body["messages"]:
            total += 4 + (_text_bytes(m.get("content")) + 2) // 3
            name = m.get("name")
            if isinstance(name, str):
                total += 1 + len(name) // 3
            for field in ("tool_calls", "function_call", "tool_call_id"):
                v = m.get(field)
                if v is not None:
                    total += 1 + (len(_json_bytes(v)) + 2) // 3
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


def prompt_token_bound(
    kind: str, body: dict, raw_size: int, *, tokens_per_image: int = DEFAULT_TOKENS_PER_IMAGE
) -> int:
    """A hard upper bound on the prompt tokens the engine can count for this request (budget holds).

    A byte-level BPE tokenizer (GPT, Llama 3, Qwen, Mistral's tekken) emits at most one token per
    byte of text, and the request's JSON (``raw_size`` bytes) holds every byte of text the template
    renders from it, escapes only making it longer. What the template adds on top is bounded
    separately: its fixed text, role markers and tool-use instructions (``TEMPLATE_*``), and the
    whitespace of a template
    that re-indents JSON (``tojson(indent=4)``), at most one whitespace run, pre-tokenized into at
    most two tokens, per structural character of the rendered fields. Images and audio count
    ``tokens_per_image`` each (the route's model's bound from the catalog). The safety factor over the typical estimate is therefore about 3x
    for text; the engine's reported usage is what is billed.
    """
    _, structural, tools = _rendered_extras(body)
    messages = len(body.get("messages") or ()) if kind == "chat" else 1
    preamble = TEMPLATE_TOOLS_PREAMBLE if structural else 0
    return (
        raw_size
        + 2 * structural
        + TEMPLATE_PER_MESSAGE * messages
        + TEMPLATE_PER_TOOL * tools
        + TEMPLATE_FIXED
        + preamble
        + tokens_per_image * _media_parts(body)
    )


def choices_per_request(kind: str, body: dict, n: int) -> int:
    """How many completions the engine generates for one request, each up to the output limit.

    ``n`` per prompt (or ``best_of`` when larger: older vLLM generates ``best_of`` and returns ``n``),
    and on ``/v1/completions`` one batch entry per prompt when ``prompt`` is an array of strings or
    of token-id arrays (an array of integers is one prompt)."""
    best_of = body.get("best_of")
    per_prompt = max(n, best_of) if _is_int(best_of) else n
    if kind == "text":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and not all(_is_int(p) for p in prompt):
            return per_prompt * len(prompt)
    return per_prompt


def output_limit(kind: str, body: dict) -> int | None:
    """The per-choice output limit the engine would apply on this endpoint, or None when unset.

    Every field in ``LENGTH_FIELDS`` is validated; the first one set (the engine's precedence) wins.
    ``validate`` has already checked each is a positive integer."""
    for name in LENGTH_FIELDS[kind]:
        v = body.get(name)
        if v is not None:
            return v
    return None


def normalise_output_limit(body: dict, limit: int) -> None:
    """Forward exactly one output limit: ``max_tokens`` = ``limit``, every other length field gone."""
    for name in LENGTH_FIELDS["chat"]:
        body.pop(name, None)
    body[FORWARDED_LENGTH_FIELD] = limit


def ensure_serialisable(body: dict) -> None:
    """Refuse, before admission, a body the gateway could not serialise to forward it.

    ``orjson.loads`` accepts deeper nesting than ``orjson.dumps`` writes (dumps stops at 255 levels),
    so a body can parse and still fail when forwarded; that must be a 400 before a hold exists,
    not a 500 after."""
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise BadRequest(
            f"the request body cannot be forwarded ({exc}); nest JSON at most 254 levels deep",
            code="invalid_json",
        ) from exc


def validate(kind: str, body, *, absurd_max_tokens: int) -> tuple[str, bool, int | None, int, bool]:
    """Check the fields we use; returns (model, stream, the output limit per choice or None, n,
    client_wants_usage). The output limit is the one the engine would apply (``output_limit``)."""
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
    for name in LENGTH_FIELDS[kind]:
        v = body.get(name)
        if v is None:
            continue
        if not _is_int(v):
            raise BadRequest(f"'{name}' must be an integer", param=name)
        if v < 1:
            raise BadRequest(f"'{name}' must be at least 1", param=name)
        if v > absurd_max_tokens:
            raise BadRequest(f"'{name}' is larger than any model here can produce", param=name)
    max_tokens = output_limit(kind, body)
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not _is_int(n) or n < 1 or n > 16:
        raise BadRequest("'n' must be an integer between 1 and 16", param="n")
    best_of = body.get("best_of")
    if best_of is not None and (not _is_int(best_of) or best_of < 1 or best_of > 16):
        raise BadRequest("'best_of' must be an integer between 1 and 16", param="best_of")
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
