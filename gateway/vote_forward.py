"""Voting requests through the gateway: sampling in rounds until the majority is confident, within
the request's budget of samples and the tenant's (docs/voting.md, docs/decisions/0041).

Two steps of the pipeline call in here, and only for a request that votes:

- ``prepare`` (after ``route``, before ``admit``): reads ``governor.vote`` (removed from the body,
  like ``service_tier``) or, on a route whose voting mode is ``"n"``, ``n`` above 1; refuses what
  cannot be voted on with a 400; and makes the worst case the whole budget (``choices`` = the
  samples, the prompt bound once per sample), so admission holds for it and settlement books what
  was spent.
- ``forward_vote`` (inside ``settle.guard``, in place of ``forward``): reserves the samples against
  the tenant's monthly sample budget (a Redis hash, ``<prefix>votes:<tenant>:<period>``), draws the
  rounds (one request with ``n`` = the round's samples; a deployment that refuses ``n`` or returns
  fewer choices gets the rest as parallel single requests), stops by ``gateway.voting``'s rule, and
  answers one chat completion: the majority's sample as the only choice, usage summed over every
  sample, and the vote in ``governor.vote`` and the ``x-governor-samples`` headers.

Only non-streamed requests vote; ``stream: true`` is refused with a 400 (the answer is not known
until the vote ends, so a stream would only add latency to the first byte).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from gateway import batchlines
from gateway import metrics as m
from gateway.endpoints import upstream_url
from gateway.replies import Reply, error_body, error_reply, send_json
from gateway.stages.settle import answer as settle_answer
from gateway.stages.settle import commit, finish_without_output
from gateway.validation import prompt_token_bound
from gateway.voting import (
    STATE,
    Tally,
    VoteError,
    VoteSpec,
    extract,
    leader_probability,
    parse_spec,
    round_size,
    should_stop,
)
from snapshot.contract import period_key

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext

log = logging.getLogger("gateway.voting")

CONNECT_ERRORS = (ConnectionError, OSError, TimeoutError)
# A reservation of samples whose worker died is forgotten after this long (it stops counting as held).
HOLD_TTL_S = 3600
# Deployments (by base URL) that refused ``n`` > 1: their rounds go out as single requests.
NO_N: set[str] = set()

# The tenant's samples this month: "used" (seeded from Postgres when Redis lost it) and one
# "h:<event id>" = "<samples>:<expiry epoch>" per vote in flight. Grants what the request asks, or
# what is left when that is less; 0 when nothing is left.
RESERVE = """
local key = KEYS[1]
local limit, want, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
redis.call('HSETNX', key, 'used', ARGV[3])
local held = 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'h:' then
    local v = all[i + 1]
    local sep = string.find(v, ':', 1, true)
    if tonumber(string.sub(v, sep + 1)) < now then
      redis.call('HDEL', key, f)
    else
      held = held + tonumber(string.sub(v, 1, sep - 1))
    end
  end
end
local used = tonumber(redis.call('HGET', key, 'used'))
local left = limit - used - held
redis.call('EXPIRE', key, ARGV[7])
if left <= 0 then return {0, used, held} end
local grant = math.min(want, left)
redis.call('HSET', key, 'h:' .. ARGV[4], grant .. ':' .. (now + tonumber(ARGV[6])))
return {grant, used, held}
"""
RELEASE = """
redis.call('HDEL', KEYS[1], 'h:' .. ARGV[1])
return redis.call('HINCRBY', KEYS[1], 'used', ARGV[2])
"""


def votes_key(prefix: str, tenant_id: int, pkey: str) -> str:
    return f"{prefix}votes:{tenant_id}:{pkey}"


@dataclass(slots=True)
class VoteState:
    """One voting request: what it asked for, what it may spend, and the vote so far."""

    spec: VoteSpec
    budget: int = 0  # samples this vote may spend: the request's, or less when the tenant has less
    tally: Tally = field(default_factory=Tally)
    rounds: int = 0
    stopped: str = ""
    reserved: tuple[str, str] | None = None  # (Redis key, event id) of the tenant's reservation
    first_choice: dict = field(default_factory=dict)  # answer -> the first sample that gave it

    @property
    def spent(self) -> int:
        return self.tally.spent

    @property
    def saved(self) -> int:
        return max(0, self.budget - self.tally.spent)

    def report(self) -> dict:
        answer, a, b = self.tally.top()
        return {
            "answer": answer,
            "share": round(self.tally.share(), 4),
            "votes": dict(self.tally.counts.most_common(10)),
            "abstained": self.tally.abstained,
            "samples": self.spent,
            "budget": self.budget,
            "max_samples": self.spec.max_samples,
            "saved": self.saved,
            "rounds": self.rounds,
            "stopped": self.stopped,
            "leader_probability": round(leader_probability(a, b), 4) if a else 0.0,
            "confidence": self.spec.confidence,
        }


def _bad(message: str, param: str, code: str) -> Reply:
    return error_reply(400, message, "invalid_request_error", code, param, reason="bad_request")


def prepare(gw: Gateway, ctx: RequestContext) -> Reply | None:
    """Turn a voting request into one admission can hold for; refuse one that cannot vote."""
    body = ctx.body
    mode = ctx.route.voting
    n = body.get("n")
    if "governor" not in body and not (mode == "n" and ctx.kind == "chat" and isinstance(n, int) and n > 1):
        return None  # not a vote: nothing to do (the common case costs one lookup)
    opts = None
    if "governor" in body:
        gov = body.pop("governor")
        if gov is not None:
            if not isinstance(gov, dict):
                return _bad(
                    'governor must be an object, e.g. {"vote": {"max_samples": 8}}',
                    "governor",
                    "invalid_type",
                )
            unknown = sorted(set(gov) - {"vote"})
            if unknown:
                return _bad(
                    f"governor has unknown field(s) {', '.join(map(repr, unknown))}; known: 'vote'",
                    "governor",
                    "invalid_value",
                )
            opts = gov.get("vote")
        if opts is None or opts is False:
            via_n = mode == "n" and ctx.kind == "chat" and isinstance(n, int) and n > 1
            if not via_n:
                return None
            opts = None
    param = "n" if opts is None else "governor.vote"
    if ctx.kind != "chat":
        return _bad("voting is offered on /v1/chat/completions only", param, "vote_unsupported_endpoint")
    if mode == "off":
        return _bad(
            f"the model '{ctx.model}' does not take votes: an admin enables voting on its route",
            param,
            "voting_not_enabled",
        )
    if opts is not None and n not in (None, 1):
        return _bad(
            "send either n or governor.vote, not both: a vote returns one choice", "n", "invalid_value"
        )
    if ctx.stream:
        return _bad(
            "a vote's answer is known only when the vote ends: send it with stream false",
            param,
            "vote_stream_unsupported",
        )
    try:
        spec = parse_spec({"max_samples": n} if opts is None else opts)
    except VoteError as exc:
        return _bad(exc.message, exc.param, "invalid_value")
    if opts is None:
        spec = VoteSpec(
            spec.max_samples, spec.confidence, spec.first_round, spec.round_size, spec.extract, True
        )
        body.pop("n", None)
    ctx.state[STATE] = VoteState(spec)
    # The worst case is the whole budget: every sample may generate the limit, and every request
    # that carries samples counts the prompt again (one per sample when the engine refuses ``n``).
    ctx.choices = spec.max_samples
    ctx.prompt_bound = spec.max_samples * prompt_token_bound(
        ctx.kind, body, len(ctx.raw), tokens_per_image=ctx.route.tokens_per_image
    )
    return None


# ------------------------------------------------------------------ the tenant's samples


async def _reserve(gw: Gateway, ctx: RequestContext, vs: VoteState) -> Reply | None:
    t = ctx.tenant
    want = vs.spec.max_samples
    if not t.vote_samples_per_month:
        vs.budget = want
        return None
    now = time.time()
    pkey, end = period_key("monthly", now)
    key = votes_key(gw.config.key_prefix, t.id, pkey)
    seed = t.vote_spent if t.vote_period_key == pkey else 0
    eid = ctx.hold.event_id.hex
    try:
        grant, used, held = await gw.redis.eval(
            RESERVE,
            1,
            key,
            t.vote_samples_per_month,
            want,
            seed,
            eid,
            int(now),
            HOLD_TTL_S,
            int(end - now) + 7 * 86400,
        )
    except Exception as exc:  # noqa: BLE001
        log.warning("vote samples could not be reserved (Redis): %s", exc)
        return error_reply(
            503,
            "the gateway cannot check this tenant's voting samples right now; retry shortly",
            "service_unavailable",
            "limits_unavailable",
            reason="redis_unavailable",
        )
    if int(grant) <= 0:
        return error_reply(
            429,
            f"this tenant's voting samples for the month are spent ({int(used)} used of "
            f"{t.vote_samples_per_month}, {int(held)} held by votes in flight); send the request without a vote",
            "insufficient_quota",
            "vote_budget_exceeded",
            "governor.vote",
            headers=[(b"x-should-retry", b"false")],
            reason="vote_budget_exceeded",
        )
    vs.budget = int(grant)
    vs.reserved = (key, eid)
    return None


async def _release(gw: Gateway, vs: VoteState) -> None:
    key, eid = vs.reserved
    try:
        await gw.redis.eval(RELEASE, 1, key, eid, vs.spent)
    except Exception as exc:  # noqa: BLE001 - the reservation expires after HOLD_TTL_S
        log.warning("vote samples could not be released (Redis): %s", exc)


# ------------------------------------------------------------------ sampling


class _Unreachable(Exception):
    """No deployment of the route answered a connection."""


@dataclass(slots=True)
class _Round:
    """What one round brought back."""

    choices: list = field(default_factory=list)
    responses: list = field(default_factory=list)  # the parsed answers (their usage is summed)
    error: tuple[int, bytes] | None = None  # the first failure: (status, body)


async def _post(gw: Gateway, ctx: RequestContext, payload: dict) -> tuple[int, bytes]:
    """One request to the vote's deployment; a connection refused is retried once on another."""
    tried: set[int] = set()
    target = ctx.target
    for attempt in range(2):
        if attempt:
            target = gw.router.pick(ctx.candidates, ctx.sticky, tried)
            if target is None:
                break
        tried.add(target.deployment_id)
        payload["model"] = target.engine_model
        try:
            resp = await gw.http.post(upstream_url(target, ctx.kind), orjson.dumps(payload))
        except CONNECT_ERRORS:
            gw.router.mark_failed(target)
            m.child(m.ERRORS, "upstream_connect").inc()
            continue
        try:
            try:
                data = await resp.read_all()
            except (TimeoutError, ConnectionError):
                gw.router.mark_failed(target)
                return 502, error_body(
                    "the deployment failed mid-response", "upstream_error", "upstream_broken"
                )
        finally:
            resp.release()
        ctx.target = target
        if resp.status == 200:
            gw.router.mark_ok(target)
        elif resp.status in (502, 503, 504):
            gw.router.mark_failed(target)
        return resp.status, data
    raise _Unreachable


def _refuses_n(status: int, data: bytes) -> bool:
    """A 400 about ``n``: the engine generates one choice per request (the simulated engine, say)."""
    if status != 400:
        return False
    try:
        err = orjson.loads(data).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return False
    return isinstance(err, dict) and (err.get("param") == "n" or "'n'" in str(err.get("message")))


async def _draw(gw: Gateway, ctx: RequestContext, k: int) -> _Round:
    """``k`` samples: one request with ``n`` = k, the rest (if the deployment gave fewer or refused
    ``n``) as parallel single requests."""
    rnd = _Round()
    base = ctx.body

    def take(status: int, data: bytes) -> None:
        if status != 200:
            if rnd.error is None:
                rnd.error = (status, data)
            return
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
            rnd.error = rnd.error or (
                502,
                error_body("the deployment's answer had no choices", "upstream_error", "upstream_broken"),
            )
            return
        rnd.responses.append(parsed)
        rnd.choices += [c for c in parsed["choices"] if isinstance(c, dict)]

    url_key = ctx.target.base_url
    if k > 1 and url_key not in NO_N:
        status, data = await _post(gw, ctx, {**base, "n": k})
        if _refuses_n(status, data):
            NO_N.add(url_key)
        else:
            take(status, data)
    missing = k - len(rnd.choices)
    if missing > 0 and rnd.error is None:
        results = await asyncio.gather(
            *(_post(gw, ctx, {**base, "n": 1}) for _ in range(missing)), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                if not isinstance(r, _Unreachable):
                    raise r
                rnd.error = rnd.error or (503, b"")
            else:
                take(*r)
    del rnd.choices[k:]  # never count more than the round asked for
    return rnd


def _content(choice: dict) -> str | None:
    msg = choice.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


async def forward_vote(gw: Gateway, ctx: RequestContext, send, receive) -> None:
    """The vote, from reserving its samples to the answer; settled like any forwarded request."""
    vs: VoteState = ctx.state[STATE]
    refused = await _reserve(gw, ctx, vs)
    if refused is not None:
        await settle_answer(gw, ctx, send, refused)
        return
    disc = asyncio.ensure_future(receive())  # http.disconnect when the client goes away
    try:
        await _vote(gw, ctx, send, vs, disc)
    finally:
        disc.cancel()
        if vs.reserved is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(_release(gw, vs))


async def _vote(gw: Gateway, ctx: RequestContext, send, vs: VoteState, disc: asyncio.Future) -> None:
    spec = vs.spec
    template = None
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    error: tuple[int, bytes] | None = None
    unreachable = False
    first_sample = None
    while True:
        why = should_stop(vs.tally, spec, vs.budget)
        if why is not None:
            vs.stopped = why
            break
        if disc.done():
            vs.stopped = "client_gone"
            break
        k = round_size(spec, vs.spent, vs.budget)
        try:
            rnd = await _draw(gw, ctx, k)
        except _Unreachable:
            unreachable, vs.stopped = True, "upstream_error"
            break
        vs.rounds += 1
        for resp in rnd.responses:
            template = template or resp
            _add_usage(ctx, usage, resp, k)
        for choice in rnd.choices:
            ans = extract(_content(choice), spec.extract)
            vs.tally.add(ans)
            first_sample = first_sample or choice
            if ans is not None:
                vs.first_choice.setdefault(ans, choice)
        if rnd.error is not None:
            error, vs.stopped = rnd.error, "upstream_error"
            break
    if vs.stopped == "client_gone":
        ctx.status, ctx.error_type, ctx.http_status = "client_disconnected", "client_disconnected", 499
        _book(ctx, usage)
        await commit(gw, ctx)
        m.child(m.REQUESTS, ctx.model, "499").inc()
        return
    if vs.spent == 0:
        await _fail(gw, ctx, send, error, unreachable)
        return
    _book(ctx, usage)
    ctx.ttft = time.perf_counter() - ctx.t0
    winner = vs.tally.top()[0]
    choice = dict(vs.first_choice[winner] if winner is not None else first_sample)
    choice["index"] = 0
    out = dict(template)
    out["model"] = ctx.model
    out["choices"] = [choice]
    out["usage"] = {
        "prompt_tokens": ctx.prompt_tokens,
        "completion_tokens": ctx.completion_tokens,
        "total_tokens": ctx.prompt_tokens + ctx.completion_tokens,
    }
    if ctx.cached_tokens:
        out["usage"]["prompt_tokens_details"] = {"cached_tokens": ctx.cached_tokens}
    out["governor"] = {"vote": vs.report()}
    data = orjson.dumps(out)
    if batchlines.STATE in ctx.state:
        # A batch line's answer is kept before it is billed, as forward's is: a re-sent line gets it back.
        await batchlines.store(gw, ctx, 200, data)
    await commit(gw, ctx)
    ctx.response_body = data
    headers = ctx.headers() + [
        (b"x-governor-samples", f"{vs.spent}/{vs.budget}".encode()),
        (b"x-governor-samples-saved", str(vs.saved).encode()),
        (b"x-governor-vote-share", f"{vs.tally.share():.4f}".encode()),
        (b"x-governor-vote-stopped", vs.stopped.encode()),
    ]
    await send_json(send, 200, data, headers)
    m.child(m.REQUESTS, ctx.model, "200").inc()


def _add_usage(ctx: RequestContext, usage: dict, resp: dict, asked: int) -> None:
    """One answer's usage into the vote's; without one, the prompt estimate and the limit for each
    choice it carried (the worst case: nothing counted is billed for less than it may have cost)."""
    u = resp.get("usage")
    if isinstance(u, dict):
        usage["prompt_tokens"] += int(u.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(u.get("completion_tokens") or 0)
        details = u.get("prompt_tokens_details")
        if isinstance(details, dict):
            usage["cached_tokens"] += int(details.get("cached_tokens") or 0)
        return
    ctx.usage_estimated = True
    usage["prompt_tokens"] += ctx.prompt_est
    usage["completion_tokens"] += ctx.max_tokens * max(1, min(asked, len(resp.get("choices") or ())))


def _book(ctx: RequestContext, usage: dict) -> None:
    ctx.prompt_tokens = usage["prompt_tokens"]
    ctx.completion_tokens = usage["completion_tokens"]
    ctx.cached_tokens = usage["cached_tokens"]


async def _fail(
    gw: Gateway, ctx: RequestContext, send, error: tuple[int, bytes] | None, unreachable: bool
) -> None:
    """No sample came back: the deployment's error (or 503 when none could be reached), at no cost."""
    if unreachable or error is None or not error[1]:
        retry_s = gw.router.retry_after_s(ctx.candidates)
        ctx.status, ctx.error_type, ctx.http_status = "error", "upstream_unavailable", 503
        await finish_without_output(gw, ctx)
        body = error_body(
            f"no deployment of '{ctx.model}' could be reached; retry after {retry_s}s",
            "service_unavailable",
            "upstream_unavailable",
        )
        await send_json(send, 503, body, [*ctx.headers(), (b"retry-after", str(retry_s).encode())])
        m.child(m.REQUESTS, ctx.model, "503").inc()
        return
    status, data = error
    ctx.status, ctx.error_type, ctx.http_status = "error", f"upstream_{status}", status
    await finish_without_output(gw, ctx)
    try:
        parsed = orjson.loads(data)
        ok_shape = isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)
    except orjson.JSONDecodeError:
        ok_shape = False
    if not ok_shape:
        data = error_body(
            data[:500].decode("utf-8", "replace") or f"upstream answered {status}",
            "upstream_error",
            f"upstream_{status}",
        )
    await send_json(send, status, data, ctx.headers())
    m.child(m.REQUESTS, ctx.model, str(status)).inc()
