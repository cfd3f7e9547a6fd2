"""Stage 2, parse: the body as JSON, checked against its endpoint's rules and the tenant's caps, and
made into the body that will be forwarded.

Sets ``body``, ``model``, ``stream``, ``max_tokens``, ``choices``, ``wants_usage``, ``prompt_est``,
``prompt_bound`` (None: computed at admission, which knows the route's allowance per image) and
``longest_ids`` (embeddings given as token ids). Every refusal is a 400 in the OpenAI error shape,
and nothing is held yet.

**One output limit** (docs/decisions/0014): without a limit the gateway sets one (the tenant's cap
or ``GATEWAY_DEFAULT_MAX_TOKENS``), so the worst case is always bounded; for chat and completions
the per-choice limit the engine would apply is forwarded as ``max_tokens`` and
``max_completion_tokens`` is stripped. Streams always ask the engine for usage. The body is then
serialised once, so what cannot be forwarded is refused before anything is held.

**The traffic class** (docs/decisions/0035) is the key's, unless the request lowers it with
OpenAI's ``service_tier`` ("flex": sheddable; "priority": interactive; "auto"/"default": the key's)
or ``X-Governor-Traffic-Class``; asking for more than the key's is refused with 403. ``service_tier``
is the gateway's to read: it is not forwarded to the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from gateway.embeddings import validate_embeddings
from gateway.endpoints import MAX_TOKENS_FIELD
from gateway.replies import Reply, error_reply
from gateway.responses import validate_responses
from gateway.stages.authenticate import CLASS_HEADER
from gateway.validation import (
    BadRequest,
    choices_per_request,
    ensure_serialisable,
    estimate_prompt_tokens,
    normalise_output_limit,
    validate,
)
from snapshot.contract import CLASS_RANK, DEFAULT_CLASS, SERVICE_TIERS, lower_class

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.context import RequestContext

# The header's values: the classes, and "batch" for sheddable (how batch clients think of it).
HEADER_CLASSES = {**{c.encode(): c for c in CLASS_RANK}, b"batch": "sheddable"}


def request_class(key_class: str, header: bytes | None, body: dict) -> str:
    """The class this request is served in: the key's, or a lower one the request asks for.

    Pops ``service_tier`` from ``body``. Raises ``BadRequest`` for a value neither field knows
    (400) and for a class above the key's (403): a request may lower its own class, never raise it."""
    asked = []
    if "service_tier" in body:
        tier = body.pop("service_tier")
        if tier is not None:
            if not isinstance(tier, str) or tier not in SERVICE_TIERS:
                raise BadRequest(
                    f"service_tier must be one of {', '.join(repr(t) for t in SERVICE_TIERS)}",
                    param="service_tier",
                    code="invalid_service_tier",
                )
            if SERVICE_TIERS[tier] is not None:
                asked.append((SERVICE_TIERS[tier], "service_tier"))
    if header is not None:
        cls = HEADER_CLASSES.get(header.strip().lower())
        if cls is None:
            raise BadRequest(
                f"{CLASS_HEADER.decode()} must be one of {', '.join(CLASS_RANK)} or batch",
                param=CLASS_HEADER.decode(),
                code="invalid_traffic_class",
            )
        asked.append((cls, CLASS_HEADER.decode()))
    cls = key_class
    for want, where in asked:
        if CLASS_RANK[want] < CLASS_RANK[key_class]:
            raise BadRequest(
                f"this API key may send {key_class} traffic at most; the request asked for {want} ({where})",
                param=where,
                code="traffic_class_not_allowed",
                status=403,
            )
        cls = lower_class(cls, want)
    return cls


def bad_request(exc: BadRequest) -> Reply:
    return error_reply(
        exc.status,
        exc.message,
        "invalid_request_error",
        exc.code or "invalid_value",
        exc.param,
        reason="bad_request",
    )


def parse(cfg: GatewayConfig, ctx: RequestContext) -> Reply | None:
    kind = ctx.kind
    try:
        body = orjson.loads(ctx.raw)
    except orjson.JSONDecodeError:
        return error_reply(
            400,
            "could not parse the request body as JSON",
            "invalid_request_error",
            "invalid_json",
            reason="bad_request",
        )
    longest_ids = None
    prompt_bound = None
    try:
        if kind == "embeddings":
            model, prompt_est, prompt_bound, longest_ids = validate_embeddings(body)
            stream, max_tokens, n, wants_usage = False, 0, 1, False  # nothing generated
        elif kind == "responses":
            model, stream, max_tokens, prompt_est, prompt_bound = validate_responses(
                body, len(ctx.raw), absurd_max_tokens=cfg.absurd_max_tokens
            )
            n, wants_usage = 1, True  # its final event carries the usage: always passed on
        else:
            model, stream, max_tokens, n, wants_usage = validate(
                kind, body, absurd_max_tokens=cfg.absurd_max_tokens
            )
            prompt_est = estimate_prompt_tokens(kind, body)
        choices = choices_per_request(kind, body, n) if kind in ("chat", "text") else 1
        key_class = ctx.key.traffic_class if ctx.key is not None else DEFAULT_CLASS
        traffic_class = request_class(key_class, ctx.class_header, body)
    except BadRequest as exc:
        return bad_request(exc)
    tenant = ctx.tenant
    if tenant.max_input_tokens and prompt_est > tenant.max_input_tokens:
        return error_reply(
            400,
            f"the prompt is about {prompt_est} tokens; this tenant may send at most {tenant.max_input_tokens}",
            "invalid_request_error",
            "input_tokens_over_limit",
            "messages" if kind == "chat" else "prompt",
            reason="admission_input",
        )
    if max_tokens is not None and tenant.max_output_tokens and max_tokens > tenant.max_output_tokens:
        return error_reply(
            400,
            f"max_tokens={max_tokens} is over this tenant's limit of {tenant.max_output_tokens}",
            "invalid_request_error",
            "max_tokens_over_limit",
            "max_tokens",
            reason="admission_output",
        )
    if max_tokens is None:
        max_tokens = min(tenant.max_output_tokens or cfg.default_max_tokens, cfg.default_max_tokens)
        if kind == "responses":
            body[MAX_TOKENS_FIELD[kind]] = max_tokens
    if kind in ("chat", "text"):
        # One limit goes to the engine, the one held for: no other length field can raise it.
        normalise_output_limit(body, max_tokens)
    if stream and kind != "responses":
        so = body.get("stream_options")
        body["stream_options"] = (
            {**so, "include_usage": True} if isinstance(so, dict) else {"include_usage": True}
        )
    try:
        ensure_serialisable(body)
    except BadRequest as exc:
        return bad_request(exc)
    ctx.body, ctx.model, ctx.stream, ctx.max_tokens, ctx.choices = body, model, stream, max_tokens, choices
    ctx.traffic_class = traffic_class
    ctx.wants_usage, ctx.prompt_est, ctx.prompt_bound, ctx.longest_ids = (
        wants_usage,
        prompt_est,
        prompt_bound,
        longest_ids,
    )
    return None
