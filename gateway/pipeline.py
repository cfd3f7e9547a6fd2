"""The request path of the completion endpoints as a pipeline of stages with hooks between them
(docs/decisions/0025-a-gateway-pipeline-of-stages-and-hooks.md):

    authenticate → parse → [before_route] → route → admit → (admission control) → [before_forward]
    → forward → settle → [after_response]

The stages live in ``gateway/stages/``, one module each; the hooks are configured
(``gateway/hooks.py``). Until admission nothing is held and any stage or hook may answer; after it,
everything runs inside ``settle.guard``, so the request settles whatever fails.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway import batchlines, vote_forward
from gateway.context import RequestContext
from gateway.hooks import Hooks, run_all, run_until_reply
from gateway.replies import Reply, send_reply
from gateway.stages import settle
from gateway.stages.admit import admit
from gateway.stages.authenticate import authenticate
from gateway.stages.forward import forward
from gateway.stages.parse import parse
from gateway.stages.route import route
from gateway.voting import STATE

if TYPE_CHECKING:
    from gateway.app import Gateway


class Pipeline:
    """Runs one request through the stages, with the configured hooks at their points."""

    def __init__(self, hooks: Hooks | None = None) -> None:
        self.hooks = hooks or Hooks()

    async def __call__(self, gw: Gateway, scope, receive, send, kind: str) -> None:
        hooks = self.hooks
        ctx = RequestContext(kind)
        reply = await authenticate(gw, ctx, scope, receive)
        if reply is None:
            reply = parse(gw.config, ctx)
        if reply is None and hooks.before_route:
            reply = await run_until_reply(hooks.before_route, ctx)
        if reply is None:
            reply = route(gw, ctx)
        if reply is None:
            # A vote (docs/voting.md) is held for its whole budget of samples: before admission.
            reply = vote_forward.prepare(gw, ctx)
        line = batchlines.STATE in ctx.state
        if reply is None and line:
            # A batch line is answered at most once: a stored answer, or this attempt takes it.
            reply = await batchlines.claim(gw, ctx)
        try:
            if reply is None:
                reply = await admit(gw, ctx)
            if reply is not None:
                # Refused (or answered by a hook before routing): nothing is held.
                await send_reply(send, reply, ctx.model or None)
                return
            if hooks.capture_streams:
                ctx.response_chunks = []
            await settle.guard(gw, ctx, send, self._forward(gw, ctx, send, receive))
        finally:
            if line:
                await asyncio.shield(batchlines.release(gw, ctx))
        if hooks.after_response:
            await run_all(hooks.after_response, ctx)

    async def _forward(self, gw: Gateway, ctx: RequestContext, send, receive) -> None:
        """What follows admission, inside the settle guard: admission control's slot on a deployment
        (``gateway.admission``; a shed request is committed at no cost), the before-forward hooks,
        forwarding. The slot is given back however forwarding ends."""
        ctx.target = gw.router.pick(ctx.candidates, ctx.sticky)
        slot = None
        if gw.admission is not None and (ctx.target.max_inflight or gw.admission.signals is not None):
            got = await gw.admission.acquire(ctx.target, ctx.candidates, ctx.traffic_class)
            if isinstance(got, Reply):
                await settle.answer(gw, ctx, send, got)
                return
            slot, ctx.target = got
        try:
            if self.hooks.before_forward:
                reply = await run_until_reply(self.hooks.before_forward, ctx)
                if reply is not None:
                    await settle.answer(gw, ctx, send, reply)
                    return
            if STATE in ctx.state:
                await vote_forward.forward_vote(gw, ctx, send, receive)
            else:
                await forward(gw, ctx, send, receive)
        finally:
            if slot is not None:
                slot.release()
