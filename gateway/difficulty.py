"""Routing by difficulty in the route stage: a route's active router policy picks the cheap or the
strong version's deployments for this request, before admission (docs/routing.md, ADR 0040).

The policy comes with the snapshot (``snapshot.contract.RouterSpec``): a logistic model over the
request's lexical features (``evalkit.router``, the same code that trained it) and a threshold. The
request goes to the targets of the cheap version when ``p_cheap >= threshold``, else to the strong
version's; the weighted pick among them happens after admission as for any route. When the chosen
side has no healthy target the other side answers and the reason says so (an answer from the other
version beats a 503). The answer carries ``x-governor-routed: cheap|strong`` and
``x-governor-route-reason`` (``RequestContext.headers``); the usage event's ``version_id`` says
which version answered.

A model is built once per policy and kept (a policy's model never changes; a new one is a new id).
A spec this build cannot read (another feature set) leaves the route's candidates as they are and
says ``router_unusable`` in the reason, rather than refusing traffic the route could serve.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalkit.router import RouterError, RouterModel, request_text

if TYPE_CHECKING:
    from gateway.context import RequestContext
    from snapshot.contract import RouterSpec, Target

log = logging.getLogger("gateway.difficulty")

_MODELS: dict[int, RouterModel | None] = {}
_MAX_MODELS = 256


def _model(spec: RouterSpec) -> RouterModel | None:
    if spec.policy_id not in _MODELS:
        if len(_MODELS) >= _MAX_MODELS:
            _MODELS.clear()
        try:
            _MODELS[spec.policy_id] = RouterModel.from_dict(spec.model)
        except (RouterError, KeyError, TypeError, ValueError) as exc:
            log.error("router policy %s cannot be served: %s", spec.policy_id, exc)
            _MODELS[spec.policy_id] = None
    return _MODELS[spec.policy_id]


def route_by_difficulty(spec: RouterSpec, ctx: RequestContext, candidates: list[Target]) -> list[Target]:
    """The candidates of the version the policy picks for this request (records why in ``ctx.state``)."""
    model = _model(spec)
    if model is None:
        ctx.state["routed"], ctx.state["route_reason"] = "", "router_unusable"
        return candidates
    body = ctx.body or {}
    p = model.p_cheap(request_text(body.get("messages"), body.get("prompt", body.get("input"))))
    cheap = p >= spec.threshold
    reason = f"p_cheap={p:.3f}{'>=' if cheap else '<'}{spec.threshold:.3f}"
    sides = [("cheap", spec.cheap_version_id), ("strong", spec.strong_version_id)]
    if not cheap:
        sides.reverse()
    for i, (side, version_id) in enumerate(sides):
        chosen = [t for t in candidates if t.version_id == version_id]
        if chosen:
            if i:
                reason += f"; no healthy {sides[0][0]} deployment"
            ctx.state["routed"], ctx.state["route_reason"] = side, reason
            return chosen
    # Neither version has a candidate (the route's targets changed after the policy): route as usual.
    ctx.state["routed"], ctx.state["route_reason"] = "", reason + "; neither version is a healthy target"
    return candidates
