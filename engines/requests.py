"""OpenAI request bodies as the simulated engines read them: validation errors as vLLM words them,
the output plan (how many tokens and why it stops), embeddings and the Responses API."""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from dataclasses import dataclass

import orjson

from engines import textvec
from engines.tokens import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PRIMING, estimate_tokens, synthetic_tokens


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        )


def bad_param(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _opt_int(body: dict, name: str, *, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_param(name, f"'{name}' must be an integer")
    if minimum is not None and value < minimum:
        raise bad_param(name, f"'{name}' must be >= {minimum}, got {value}")
    return value


def _opt_number(body: dict, name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_param(name, f"'{name}' must be a number")
    if not lo <= value <= hi:
        raise bad_param(name, f"'{name}' must be between {lo} and {hi}, got {value}")
    return float(value)


def _opt_bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_param(name, f"'{name}' must be a boolean")
    return value


@dataclass(slots=True)
class Parsed:
    """A validated completion request."""

    chat: bool
    prompt_text: str
    prompt_tokens: int
    max_tokens: int | None
    stop: list[str]
    seed: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool


def parse_request(body: object, *, chat: bool, model_name: str) -> Parsed:
    """Validate an OpenAI request body; raises ``ApiError`` with the offending ``param``."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param("model", "'model' is required and must be a string")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_param("messages", "'messages' must be a non-empty array")
        parts: list[str] = []
        tokens = CHAT_TOKENS_PRIMING
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise bad_param(f"messages[{i}]", "each message needs a string 'role'")
            content = msg.get("content")
            if content is None:
                text = ""
            elif isinstance(content, str):
                text = content
            elif isinstance(content, list):
                texts = []
                for part in content:
                    if (
                        not isinstance(part, dict)
                        or part.get("type") != "text"
                        or not isinstance(part.get("text"), str)
                    ):
                        raise bad_param(f"messages[{i}].content", "only text content parts are supported")
                    texts.append(part["text"])
                text = "".join(texts)
            else:
                raise bad_param(f"messages[{i}].content", "'content' must be a string or an array of parts")
            parts.append(f"{msg['role']}: {text}\n")
            tokens += CHAT_TOKENS_PER_MESSAGE + (estimate_tokens(text) if text else 0)
        prompt_text = "".join(parts)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if not prompt:
                raise bad_param("prompt", "'prompt' must not be empty")
            prompt_text = prompt
            tokens = estimate_tokens(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_text = " ".join(map(str, prompt))
            tokens = len(prompt)
        else:
            raise bad_param(
                "prompt", "'prompt' must be a string, a one-element array of strings or token ids"
            )
    max_tokens = _opt_int(body, "max_tokens", minimum=1)
    mct = _opt_int(body, "max_completion_tokens", minimum=1)
    if chat and mct is not None:
        max_tokens = mct
    n = _opt_int(body, "n", minimum=1)
    if n is not None and n != 1:
        raise bad_param("n", "only n=1 is supported")
    _opt_number(body, "temperature", 0.0, 2.0)
    _opt_number(body, "top_p", 0.0, 1.0)
    _opt_number(body, "presence_penalty", -2.0, 2.0)
    _opt_number(body, "frequency_penalty", -2.0, 2.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad_param("seed", "'seed' must be an integer")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop] if stop else []
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = [s for s in stop if s]
    else:
        raise bad_param("stop", "'stop' must be a string or an array of up to 4 strings")
    stream = _opt_bool(body, "stream")
    include_usage = False
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise bad_param("stream_options", "'stream_options' must be an object")
        if not stream:
            raise bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true")
        iu = so.get("include_usage", False)
        if not isinstance(iu, bool):
            raise bad_param("stream_options.include_usage", "'include_usage' must be a boolean")
        include_usage = iu
    ignore_eos = _opt_bool(body, "ignore_eos")
    return Parsed(
        chat=chat,
        prompt_text=prompt_text,
        prompt_tokens=tokens,
        max_tokens=max_tokens,
        stop=stops,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=ignore_eos,
    )


def plan_output(parsed: Parsed, *, max_model_len: int) -> tuple[list[str], str]:
    """The output tokens (text pieces) and finish reason, decided up front (the text is synthetic)."""
    room = max_model_len - parsed.prompt_tokens
    seed_base = zlib.crc32(parsed.prompt_text.encode()) ^ ((parsed.seed or 0) * 0x1000193)
    if parsed.max_tokens is not None:
        n = parsed.max_tokens
        reason = "length"
    elif parsed.ignore_eos:
        n = room
        reason = "length"
    else:
        # The simulated model's own stopping point: 16..512 tokens, a function of the request.
        n = min(room, 16 + (seed_base * 2654435761 & 0xFFFFFFFF) % 497)
        reason = "stop" if n < room else "length"
    tokens = synthetic_tokens(seed_base, n)
    if parsed.stop:
        text = "".join(tokens)
        cut = min((i for i in (text.find(s) for s in parsed.stop) if i >= 0), default=-1)
        if cut >= 0:
            # Keep whole tokens before the stop string and the part of the stopping token before it.
            pos = 0
            kept: list[str] = []
            for tok in tokens:
                if pos + len(tok) > cut:
                    head = tok[: cut - pos]
                    kept.append(head)
                    break
                kept.append(tok)
                pos += len(tok)
            tokens = kept
            reason = "stop"
    return tokens, reason


# ---------------------------------------------------------------------- embeddings and responses

EMBEDDING_DIM = 256


def parse_embedding_request(body: object, *, model_name: str) -> tuple[list, list[int], str, int]:
    """Validate ``POST /v1/embeddings`` as OpenAI and vLLM do: ``input`` is a non-empty string, a
    non-empty array of non-empty strings, an array of token ids or an array of such arrays. Returns the
    inputs, their token counts, the encoding format and the dimensions."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param("model", "'model' is required and must be a string")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    inp = body.get("input")
    if isinstance(inp, str):
        inputs: list = [inp]
    elif isinstance(inp, list) and inp and all(_is_token_id(t) for t in inp):
        inputs = [inp]
    elif isinstance(inp, list):
        inputs = inp
    else:
        raise bad_param("input", "'input' must be a string, an array of strings, or an array of token ids")
    if not inputs:
        raise bad_param("input", "'input' must not be an empty array")
    tokens = []
    for i, item in enumerate(inputs):
        if isinstance(item, str) and item:
            tokens.append(estimate_tokens(item))
        elif isinstance(item, list) and item and all(_is_token_id(t) for t in item):
            tokens.append(len(item))
        else:
            raise bad_param(
                "input", f"input[{i}] must be a non-empty string or a non-empty array of token ids"
            )
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad_param("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    dims = _opt_int(body, "dimensions", minimum=1)
    if dims is not None and dims > EMBEDDING_DIM:
        raise bad_param("dimensions", f"'dimensions' must be at most {EMBEDDING_DIM} for this model")
    return inputs, tokens, fmt, dims or EMBEDDING_DIM


def _is_token_id(t: object) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


def embedding_vector(item: str | list[int], dims: int) -> list[float]:
    """A unit vector of ``dims`` floats that depends only on the input (same text, same vector): for a
    text, the light lexical encoder's (``engines.textvec``: similar wording, similar vectors, which a
    semantic cache needs); for token ids, a random one seeded by them."""
    if isinstance(item, str) and item.strip():
        return textvec.encode(item, dims).tolist()
    key = item.encode() if isinstance(item, str) else orjson.dumps(item)
    rng = random.Random(hashlib.sha256(key).digest())
    vec = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def responses_to_chat(body: object) -> dict:
    """A Responses API request as the equivalent chat request (text input only)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    inp = body.get("input")
    messages: list[dict] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    if isinstance(inp, str) and inp:
        messages.append({"role": "user", "content": inp})
    elif isinstance(inp, list) and inp:
        for i, item in enumerate(inp):
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                raise bad_param(f"input[{i}]", "each input item needs a string 'role'")
            content = item.get("content")
            if isinstance(content, list):
                texts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") not in (
                        "input_text",
                        "output_text",
                        "text",
                    ):
                        raise bad_param(f"input[{i}].content", "only text content parts are supported")
                    texts.append(part.get("text") or "")
                content = "".join(texts)
            if not isinstance(content, str):
                raise bad_param(f"input[{i}].content", "'content' must be a string or an array of text parts")
            messages.append({"role": item["role"], "content": content})
    else:
        raise bad_param("input", "'input' must be a non-empty string or array of input items")
    chat = {"model": body.get("model"), "messages": messages, "stream": body.get("stream", False)}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    return chat
