"""An answer as the cache keeps it, read from what the model sent, and sent back in the model's shape.

The cache keeps the text, the finish reason and the completion tokens (the prompt's tokens are the
new request's own). A hit is sent as the endpoint answers: a ``chat.completion`` or
``text_completion`` object, or for a stream the same chunks a model sends (a role chunk, the text in
pieces, the finish reason, the usage chunk when the client asked for it, ``[DONE]``), so an SDK cannot
tell a hit from the model but by the ``x-governor-cache: hit`` header and the ``id`` prefix.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass

import orjson

_WS = re.compile(r"\s+")
PIECE_WORDS = 4  # words per streamed chunk of a hit


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    finish_reason: str
    completion_tokens: int

    def dumps(self) -> bytes:
        return orjson.dumps({"t": self.text, "f": self.finish_reason, "c": self.completion_tokens})

    @classmethod
    def loads(cls, raw: bytes) -> Answer:
        d = orjson.loads(raw)
        return cls(d["t"], d["f"], int(d["c"]))


def same(a: str, b: str) -> bool:
    """Whether two answers say the same: equal once case and runs of white space are set aside."""
    return _WS.sub(" ", a).strip().casefold() == _WS.sub(" ", b).strip().casefold()


def _choice_text(kind: str, choice: dict) -> str | None:
    if kind == "text":
        t = choice.get("text")
        return t if isinstance(t, str) else None
    msg = choice.get("message") or {}
    if msg.get("tool_calls") or not isinstance(msg.get("content"), str):
        return None
    return msg["content"]


def from_json(kind: str, body: bytes | None, completion_tokens: int) -> Answer | None:
    """The answer in a whole JSON response, or None when it is not one the cache keeps."""
    if not body:
        return None
    try:
        d = orjson.loads(body)
        choices = d["choices"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    text = _choice_text(kind, choices[0])
    fr = choices[0].get("finish_reason")
    if text is None or fr not in ("stop", "length"):
        return None
    return Answer(text, fr, completion_tokens)


def from_stream(kind: str, chunks: list[bytes] | None, completion_tokens: int) -> Answer | None:
    """The answer in the SSE bytes that went out, or None."""
    if not chunks:
        return None
    pieces: list[str] = []
    fr = None
    for ev in b"".join(chunks).split(b"\n\n"):
        if not ev.startswith(b"data:"):
            continue
        payload = ev[5:].strip()
        if payload == b"[DONE]" or not payload:
            continue
        try:
            d = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(d, dict) or "error" in d:
            return None
        for c in d.get("choices") or ():
            if c.get("index", 0) != 0:
                return None
            if kind == "text":
                t = c.get("text")
            else:
                delta = c.get("delta") or {}
                if delta.get("tool_calls"):
                    return None
                t = delta.get("content")
            if isinstance(t, str):
                pieces.append(t)
            if c.get("finish_reason"):
                fr = c["finish_reason"]
    if fr not in ("stop", "length"):
        return None
    return Answer("".join(pieces), fr, completion_tokens)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def as_json(kind: str, model: str, a: Answer, prompt_tokens: int) -> bytes:
    """A hit as the endpoint's whole JSON answer."""
    created = int(time.time())
    if kind == "text":
        choice = {"index": 0, "text": a.text, "logprobs": None, "finish_reason": a.finish_reason}
        rid, obj = "cmpl-cache-" + uuid.uuid4().hex, "text_completion"
    else:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": a.text},
            "logprobs": None,
            "finish_reason": a.finish_reason,
        }
        rid, obj = "chatcmpl-cache-" + uuid.uuid4().hex, "chat.completion"
    return orjson.dumps(
        {
            "id": rid,
            "object": obj,
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": _usage(prompt_tokens, a.completion_tokens),
            "system_fingerprint": "governor-semantic-cache",
        }
    )


def _pieces(text: str) -> list[str]:
    words = re.findall(r"\s*\S+", text)
    return ["".join(words[i : i + PIECE_WORDS]) for i in range(0, len(words), PIECE_WORDS)] or [""]


def as_stream(kind: str, model: str, a: Answer, prompt_tokens: int, *, with_usage: bool) -> bytes:
    """A hit as the endpoint's SSE stream, ``[DONE]`` included."""
    created = int(time.time())
    chat = kind != "text"
    rid = ("chatcmpl-cache-" if chat else "cmpl-cache-") + uuid.uuid4().hex
    obj = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": rid, "object": obj, "created": created, "model": model}
    out = []

    def event(choice: dict | None, usage: dict | None = None) -> None:
        d = {**head, "choices": [choice] if choice is not None else []}
        if usage is not None:
            d["usage"] = usage
        out.append(b"data: " + orjson.dumps(d) + b"\n\n")

    pieces = _pieces(a.text)
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        fr = a.finish_reason if last else None
        if chat:
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            event({"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr})
        else:
            event({"index": 0, "text": piece, "logprobs": None, "finish_reason": fr})
    if with_usage:
        event(None, _usage(prompt_tokens, a.completion_tokens))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)
