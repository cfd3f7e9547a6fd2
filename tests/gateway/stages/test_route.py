"""The route stage: which route, whether this key may use it, and which deployments may take it."""

from __future__ import annotations

from types import SimpleNamespace

import orjson

from gateway.context import RequestContext
from gateway.router import Router
from gateway.stages.route import route
from tests.gateway.inproc import snapshot, target


def _setup(routes: dict, *, model: str = "m", kind: str = "chat", body=None, session=None, **snap_kw):
    snap = snapshot(routes=routes, **snap_kw)
    gw = SimpleNamespace(snapshots=SimpleNamespace(current=snap), router=Router(eject_s=10))
    ctx = RequestContext(kind)
    ctx.key = next(iter(snap.keys.values()))
    ctx.tenant = snap.tenants[1]
    ctx.model, ctx.body, ctx.session, ctx.prompt_est = model, body or {}, session, 5
    return gw, ctx


def _code(reply) -> str:
    return orjson.loads(reply.body)["error"]["code"]


def test_unknown_and_forbidden_models_get_the_same_404():
    routes = {
        "m": {"targets": [target(1, "http://a/v1")]},
        "theirs": {"targets": [target(2, "http://b/v1")], "tenant_ids": [2]},
    }
    unknown = route(*_setup(routes, model="nope"))
    theirs = route(*_setup(routes, model="theirs"))
    not_on_key = route(*_setup(routes, key={"models": ["other"]}))
    for reply in (unknown, theirs, not_on_key):
        assert reply.status == 404 and _code(reply) == "model_not_found" and reply.reason == "unknown_model"
    # Which names exist is not disclosed: the message differs only by the name asked for.
    assert unknown.body.replace(b"nope", b"X") == theirs.body.replace(b"theirs", b"X")


def test_a_route_that_does_not_serve_the_endpoint_is_a_404_naming_the_path():
    reply = route(*_setup({"m": {"targets": [target(1, "http://a/v1", task="embed")]}}))
    assert reply.status == 404 and _code(reply) == "unsupported_endpoint"
    assert b"/v1/chat/completions" in reply.body


def test_token_inputs_longer_than_every_context_are_a_400():
    gw, ctx = _setup(
        {"m": {"targets": [target(1, "http://a/v1", task="embed", max_model_len=8)]}}, kind="embeddings"
    )
    ctx.longest_ids = 9
    reply = route(gw, ctx)
    assert reply.status == 400 and _code(reply) == "context_length_exceeded"
    ctx.longest_ids = 8
    assert route(gw, ctx) is None


def test_no_healthy_deployment_is_a_503_with_retry_after():
    gw, ctx = _setup({"m": {"targets": [target(1, "http://a/v1", status="UNKNOWN")]}})
    reply = route(gw, ctx)
    assert reply.status == 503 and _code(reply) == "no_deployment" and reply.reason == "no_deployment"
    assert dict(reply.headers)[b"retry-after"] == b"10"


def test_candidates_are_the_healthy_targets_of_the_right_pool_and_sticky_comes_from_user_or_session():
    routes = {
        "m": {
            "long_context_threshold": 100,
            "targets": [
                target(1, "http://a/v1"),
                target(2, "http://b/v1", pool="long-context"),
                target(3, "http://c/v1", status="DEPLOY_FAILED"),
                target(4, "http://d/v1", task="embed"),
            ],
        }
    }
    gw, ctx = _setup(routes, body={"user": "u-1"}, session=b"s-1")
    assert route(gw, ctx) is None
    assert [t.deployment_id for t in ctx.candidates] == [1] and ctx.route.name == "m"
    assert ctx.sticky == "u-1" and ctx.snapshot is gw.snapshots.current
    gw, ctx = _setup(routes, session=b"s-1")
    ctx.prompt_est = 500
    assert route(gw, ctx) is None
    assert [t.deployment_id for t in ctx.candidates] == [2] and ctx.sticky == "s-1"
