"""Stage 4, admit: the price check, the worst case held against the budget, and the rate limits,
in one Redis script (``gateway/limits.py``, ``ADMIT``) that also writes the request's ledger entry.

Sets ``hold`` (see ``gateway.context.Hold``) and ``rl_headers`` when the request is admitted; from
then on it must settle (docs/decisions/0014). The worst case covers whatever the engine can count
(tools, schemas, template, images at the route's bound: ``gateway.validation.prompt_token_bound``)
and everything it may generate (every choice, every prompt of a batch). Refusals: 403
``price_missing``; 429 for a rate limit, a spent budget or a request whose worst case alone is over
what is left; 503 ``limits_unavailable`` when Redis cannot be asked and there is something to check.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from gateway.batchlines import STATE
from gateway.context import Hold
from gateway.ledger import ledger_record
from gateway.limits import REASONS, Admission
from gateway.pricing import MIN_HOLD_NANOS, price_refusal
from gateway.replies import Reply, error_reply
from gateway.validation import prompt_token_bound
from snapshot.contract import BudgetInfo, KeyInfo, TenantInfo, period_key

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext

log = logging.getLogger("gateway")


class Periods:
    """Caches the current budget period key per period kind until it ends."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, float]] = {}

    def get(self, period: str, now: float) -> tuple[str, float]:
        c = self._cache.get(period)
        if c is None or now >= c[1]:
            c = self._cache[period] = period_key(period, now)
        return c


def budget_terms(budget: BudgetInfo | None, now: float, periods: Periods) -> tuple[str, int, int, int]:
    """(period key, spend to seed Redis with, TTL of the period's hash, hard cap or -1)."""
    if budget is None:
        return "", 0, 0, -1
    pkey, pend = periods.get(budget.period, now)
    seed = budget.spent_nanos if budget.spent_period_key == pkey else 0
    ttl = int(pend - now) + 7 * 86400
    cap = budget.hard_cap_nanos if budget.hard_cap_nanos is not None else -1
    return pkey, seed, ttl, cap


def worst_case_nanos(
    *, prompt_bound: int, max_tokens: int, choices: int, in_p: int, out_p: int, cap: int
) -> int:
    """What to hold. No hard cap: nothing. With one, every request holds something, free ones too,
    so a budget spent exactly to its cap refuses them (the script admits a zero hold at the cap)."""
    if cap < 0:
        return 0
    return max(prompt_bound * in_p + max_tokens * choices * out_p, MIN_HOLD_NANOS)


def usd(nanos: int) -> str:
    """Nano-dollars as dollars, with enough places that a small amount does not read as $0."""
    return f"${nanos / 1e9:.9f}".rstrip("0").rstrip(".") if nanos else "$0"


def refusal(adm: Admission, hold: int, cap: int) -> Reply:
    """The answer to a request ADMIT turned down: the budget, or which rate limit and when to retry."""
    reason = REASONS[adm.reason]
    if reason == "budget_exceeded":
        left = cap - adm.budget_spent_nanos
        if hold > left > 0:
            # Nothing else could make room: this request alone is larger than what is left. A quota
            # condition like the next one (429 insufficient_quota, not retried), with its own code:
            # the client can still get through by asking for less.
            return error_reply(
                429,
                f"this request's worst case, {usd(hold)}, exceeds the budget's remaining {usd(left)}; "
                "lower max_tokens (or max_completion_tokens) or send a shorter prompt",
                "insufficient_quota",
                "worst_case_over_budget",
                "max_tokens",
                headers=[(b"x-should-retry", b"false")],
                reason="worst_case_over_budget",
            )
        if left > 0:
            message = (
                f"this tenant's budget for the period has {usd(left)} left, all of it held by "
                "requests in flight; retry when they finish"
            )
        else:
            message = "this tenant's budget for the period is spent (hard cap reached)"
        return error_reply(
            429,
            message,
            "insufficient_quota",
            "budget_exceeded",
            headers=[(b"x-should-retry", b"false")],
            reason="budget_exceeded",
        )
    retry_s = max(1, -(-adm.retry_ms // 1000))
    which = "requests" if reason.endswith("requests") else "tokens"
    scope_ = "API key" if reason.startswith("key") else "tenant"
    return error_reply(
        429,
        f"rate limit reached for {which} per minute on this {scope_} (limit {adm.limit_or_reset_ms}); "
        f"retry after {retry_s}s",
        "rate_limit_error",
        "rate_limit_exceeded",
        headers=[
            (b"retry-after", str(retry_s).encode()),
            (b"retry-after-ms", str(adm.retry_ms).encode()),
            (f"x-ratelimit-limit-{which}".encode(), str(adm.limit_or_reset_ms).encode()),
            (f"x-ratelimit-remaining-{which}".encode(), b"0"),
            (f"x-ratelimit-reset-{which}".encode(), f"{adm.retry_ms / 1000:.3f}s".encode()),
        ],
        reason=reason,
    )


def rate_limit_headers(adm: Admission, key: KeyInfo, tenant: TenantInfo) -> list:
    """``x-ratelimit-*`` for an admitted request under a limit: the tighter of key and tenant."""
    headers: list = []
    reset = f"{adm.limit_or_reset_ms / 1000:.3f}s".encode()
    rpm = min(x for x in (key.rpm, tenant.rpm, 1 << 62) if x)
    tpm = min(x for x in (key.tpm, tenant.tpm, 1 << 62) if x)
    if adm.remaining_requests >= 0:
        headers += [
            (b"x-ratelimit-limit-requests", str(rpm).encode()),
            (b"x-ratelimit-remaining-requests", str(adm.remaining_requests).encode()),
            (b"x-ratelimit-reset-requests", reset),
        ]
    if adm.remaining_tokens >= 0:
        headers += [
            (b"x-ratelimit-limit-tokens", str(tpm).encode()),
            (b"x-ratelimit-remaining-tokens", str(adm.remaining_tokens).encode()),
            (b"x-ratelimit-reset-tokens", reset),
        ]
    return headers


async def admit(gw: Gateway, ctx: RequestContext) -> Reply | None:
    model, route, key, tenant = ctx.model, ctx.route, ctx.key, ctx.tenant
    price = ctx.snapshot.prices.get(model)
    if STATE in ctx.state:
        # A batch line is billed at the batch price when one is published (docs/decisions/0036).
        price = ctx.snapshot.batch_prices.get(model) or price
    refused = price_refusal(model=model, route=route, price=price, tenant=tenant)
    if refused is not None:
        return error_reply(
            403, refused, "invalid_request_error", "price_missing", "model", reason="price_missing"
        )
    in_p = price.input_nanos if price else 0
    out_p = price.output_nanos if price else 0
    price_id = price.price_id if price else None
    tokens_est = ctx.prompt_est + ctx.max_tokens * ctx.choices
    prompt_bound = ctx.prompt_bound
    if prompt_bound is None:
        prompt_bound = prompt_token_bound(
            ctx.kind, ctx.body, len(ctx.raw), tokens_per_image=route.tokens_per_image
        )
    budget = tenant.budget
    pkey, seed, ttl, cap = budget_terms(budget, ctx.started_at, gw.periods)
    hold = worst_case_nanos(
        prompt_bound=prompt_bound,
        max_tokens=ctx.max_tokens,
        choices=ctx.choices,
        in_p=in_p,
        out_p=out_p,
        cap=cap,
    )
    limited = bool(key.rpm or key.tpm or tenant.rpm or tenant.tpm)
    event_id = uuid.uuid4()
    record = ledger_record(
        gateway=gw.name,
        tenant_id=tenant.id,
        api_key_id=key.id,
        model=model,
        price_id=price_id,
        in_p=in_p,
        out_p=out_p,
        prompt_est=ctx.prompt_est,
        hold=hold,
        budget_active=budget is not None,
        period_key=pkey,
        seed=seed,
        ttl=ttl,
        stream=ctx.stream,
        started_at=ctx.started_at,
        traffic_class=ctx.traffic_class,
    )
    recorded = True
    try:
        adm = await gw.limiter.admit(
            key_id=key.id,
            tenant_id=tenant.id,
            key_rpm=key.rpm,
            key_tpm=key.tpm,
            tenant_rpm=tenant.rpm,
            tenant_tpm=tenant.tpm,
            tokens=tokens_est,
            hold_nanos=hold,
            cap_nanos=cap,
            seed_spent_nanos=seed,
            period_key=pkey or "none",
            budget_ttl_s=ttl or 60,
            event_id=event_id.hex,
            record=record,
        )
    except Exception as exc:  # noqa: BLE001
        log.warning("admission failed (Redis): %s", exc)
        if limited or cap >= 0:
            # Fail closed: limits and budgets cannot be checked.
            return error_reply(
                503,
                "the gateway cannot check limits right now; retry shortly",
                "service_unavailable",
                "limits_unavailable",
                reason="redis_unavailable",
            )
        # Nothing to check and nothing held: serve, without a ledger entry (only a worker's death
        # during this request would then go unbilled).
        adm, recorded = None, False
    if adm is not None:
        if not adm.admitted:
            return refusal(adm, hold, cap)
        if limited:
            ctx.rl_headers = rate_limit_headers(adm, key, tenant)
    ctx.hold = Hold(
        event_id=event_id,
        amount=hold,
        cap=cap,
        tokens_est=tokens_est,
        in_p=in_p,
        out_p=out_p,
        price_id=price_id,
        period_key=pkey,
        seed=seed,
        ttl=ttl,
        limited=limited,
        recorded=recorded,
    )
    return None
