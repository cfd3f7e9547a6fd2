"""What a request's cache entry depends on (its scope) and the text that is embedded.

The scope is a hash of everything besides the prompt that an answer depends on: the tenant, the key's
permission scope (the models it may use), the route, the model version that would answer, the system
prompt (its text, and the version the request names), the knowledge-base version the request names,
the embedding model's version, the route's cache generation, and every other field of the body
(temperature, top_p, max_tokens, stop, seed, tools, response format...). Entries of two scopes are
in two indexes: a lookup can never find another tenant's entry, nor one made for another version.
"""

from __future__ import annotations

import hashlib

import orjson

# The body's fields that are the prompt, or say how the answer is delivered, not what it is.
NOT_SCOPE = frozenset(
    {"messages", "prompt", "model", "stream", "stream_options", "user", "metadata", "governor_cache"}
)
SYSTEM_ROLES = frozenset({"system", "developer"})
OPTIONS_FIELD = "governor_cache"


class NotCacheable(Exception):
    """The request's prompt is not text only (an image, a tool result...): the cache stays out."""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise NotCacheable("a non-text part")
            parts.append(p["text"])
        return "\n".join(parts)
    if content is None:
        return ""
    raise NotCacheable("content of an unknown shape")


def prompt_parts(kind: str, body: dict) -> tuple[str, str]:
    """(system prompt, the rest of the conversation as one text) of a chat or completions body."""
    if kind == "text":
        p = body.get("prompt")
        if not isinstance(p, str):
            raise NotCacheable("a prompt that is not one string")
        return "", p
    system, rest = [], []
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            raise NotCacheable("a message that is not an object")
        role = m.get("role")
        if m.get("tool_calls") or role == "tool":
            raise NotCacheable("tool calls")
        text = _text(m.get("content"))
        if role in SYSTEM_ROLES:
            system.append(text)
        else:
            rest.append(text if role == "user" and not rest else f"{role}: {text}")
    return "\n".join(system), "\n".join(rest)


def options_refusal(raw: object) -> str | None:
    """Why a request's ``governor_cache`` field is wrong, or None."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return '\'governor_cache\' must be an object, e.g. {"skip": true} or {"knowledge_base": "handbook@7"}'
    unknown = set(raw) - {"skip", "knowledge_base", "prompt_version"}
    if unknown:
        return f"'governor_cache' does not take {', '.join(sorted(unknown))}: only skip, knowledge_base, prompt_version"
    if "skip" in raw and not isinstance(raw["skip"], bool):
        return "'governor_cache.skip' must be true or false"
    for f in ("knowledge_base", "prompt_version"):
        if f in raw and (not isinstance(raw[f], str) or not raw[f] or len(raw[f]) > 200):
            return f"'governor_cache.{f}' must be a non-empty string of at most 200 characters"
    return None


def scope_id(
    *,
    tenant_id: int,
    key_models: frozenset[str] | None,
    route: str,
    version: str,
    embedder: str,
    generation: int,
    system: str,
    options: dict,
    body: dict,
    kind: str,
    max_tokens: int,
) -> str:
    """The scope's id: 32 hex characters of a SHA-256 over its parts (canonical JSON)."""
    params = {k: v for k, v in body.items() if k not in NOT_SCOPE}
    params["max_tokens"] = max_tokens  # as forwarded (the gateway may have set it)
    params.pop("max_completion_tokens", None)
    parts = [
        tenant_id,
        sorted(key_models) if key_models is not None else "*",
        route,
        kind,
        version,
        embedder,
        generation,
        hashlib.sha256(system.encode()).hexdigest(),
        options.get("prompt_version", ""),
        options.get("knowledge_base", ""),
        params,
    ]
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
