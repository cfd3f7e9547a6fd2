"""Stage 3, route: the public model name to a route this key may use that serves this endpoint, and
the deployments that may take the request now.

Sets ``snapshot`` (the one admission prices from), ``route``, ``candidates`` and ``sticky``. A model
that does not exist and one the key or tenant may not use get the same 404 (which names exist is
not disclosed). Candidates are the healthy targets that serve the endpoint, in the right pool
(``gateway/router.py``: a prompt over the route's long-context threshold, in the engine's tokens as
the router estimates them, goes to the long-context pool); none left → 503 with ``Retry-After``,
before anything is held. Which candidate gets the request is picked
after admission, just before forwarding, where a hook may change it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.difficulty import route_by_difficulty
from gateway.embeddings import context_error
from gateway.endpoints import PATHS, serves
from gateway.replies import Reply, error_reply
from gateway.stages.authenticate import may_use

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext


def route(gw: Gateway, ctx: RequestContext) -> Reply | None:
    model, kind = ctx.model, ctx.kind
    snap = gw.snapshots.current
    r = snap.routes.get(model)
    if r is None or not r.targets or not may_use(ctx.key, ctx.tenant, r):
        return error_reply(
            404,
            f"the model '{model}' does not exist or you do not have access to it",
            "invalid_request_error",
            "model_not_found",
            "model",
            reason="unknown_model",
        )
    if not any(serves(t, kind) for t in r.targets):
        return error_reply(
            404,
            f"the model '{model}' is not served at {PATHS[kind]}: its deployments do not run that endpoint",
            "invalid_request_error",
            "unsupported_endpoint",
            "model",
            reason="unsupported_endpoint",
        )
    ctx_err = context_error(ctx.longest_ids, [t for t in r.targets if serves(t, kind)])
    if ctx_err is not None:
        return error_reply(
            400, ctx_err, "invalid_request_error", "context_length_exceeded", "input", reason="bad_request"
        )
    router = gw.router
    candidates = router.candidates(
        r,
        router.prompt_tokens(model, kind, ctx.prompt_est),
        [t for t in r.targets if serves(t, kind)],
        needs_tokens=ctx.prompt_est,
    )
    if not candidates:
        # Unknown (not heard from since the start), failing or ejected: 503 with a time to retry.
        retry_s = router.retry_after_s(r.targets)
        return error_reply(
            503,
            f"no healthy deployment serves '{model}' right now; retry after {retry_s}s",
            "service_unavailable",
            "no_deployment",
            headers=[(b"retry-after", str(retry_s).encode())],
            reason="no_deployment",
        )
    if r.router is not None and kind != "embeddings":
        candidates = route_by_difficulty(r.router, ctx, candidates)  # a router policy (ADR 0040)
    ctx.snapshot, ctx.route, ctx.candidates = snap, r, candidates
    session = ctx.session
    ctx.sticky = ctx.body.get("user") or (session.decode("latin-1") if session else None)
    return None
