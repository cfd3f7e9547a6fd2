"""Long-request isolation, measured on a route's own traffic (docs/decisions/0039).

Isolation is worth having if short requests get their first token sooner while long prompts go to
the long-context pool. This compares, over a window, the p95 time to first token of the route's short
requests in the periods when it isolated long prompts (its long-context threshold was set) with the
periods when it did not, from the gateway's usage events and the route's audited threshold history.
It is an observational comparison, not an experiment: the two periods may differ in load too, so the
page shows the sample sizes, the intervals and how many long prompts each period carried.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass

import numpy as np

from audit.selectors import events_for_object
from billing.selectors.usage import usage_route_samples
from deployments.models import ModelRoute

THRESHOLD_FIELD = "long_context_threshold_tokens"
# Fewer successful short requests than this on either side: "not enough data" rather than a p95.
MIN_SAMPLES = 20
QUANTILE = 0.95
Z_95 = 1.959964
SAMPLE_LIMIT = 100_000


@dataclass(frozen=True)
class Period:
    """A stretch of the window with one threshold in force (None: long prompts not isolated)."""

    start: dt.datetime
    end: dt.datetime
    threshold: int | None

    @property
    def isolated(self) -> bool:
        return self.threshold is not None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def threshold_periods(*, route: ModelRoute, since: dt.datetime, until: dt.datetime) -> list[Period]:
    """The route's long-context threshold over ``[since, until)``, from its audit trail.

    Walked back from the value in force now: every audited change after ``since`` says what the value
    was before it (a route's creation: nothing, so not isolated), so a window that starts before the
    first recorded change still gets the right value."""
    changes = []
    for e in events_for_object(object_type=route._meta.label_lower, object_id=route.pk).filter(at__gt=since):
        if THRESHOLD_FIELD in (e.after or {}):
            changes.append((e.at, (e.before or {}).get(THRESHOLD_FIELD), e.after[THRESHOLD_FIELD]))
    value = changes[0][1] if changes else route.long_context_threshold_tokens
    periods, start = [], since
    for at, _, after in changes:
        if at >= until:
            break
        if after == value:
            continue  # a save that left the threshold as it was (a route's creation without one)
        if at > start:
            periods.append(Period(start, at, value))
        start, value = at, after
    periods.append(Period(start, until, value))
    return periods


def p95_interval(sorted_values: list[float], q: float = QUANTILE) -> tuple[float | None, float | None]:
    """A distribution-free 95 % confidence interval for the ``q`` quantile: the order statistics
    whose ranks bracket ``n q`` by 1.96 binomial standard deviations (a bound that would fall outside
    the samples is None: too few of them to say)."""
    n = len(sorted_values)
    if n == 0:
        return None, None
    half = Z_95 * math.sqrt(n * q * (1 - q))
    lo, hi = math.floor(n * q - half), math.ceil(n * q + half)  # 1-based ranks
    return (
        sorted_values[lo - 1] if lo >= 1 else None,
        sorted_values[hi - 1] if hi <= n else None,
    )


def _side(ttfts: list[float], long_prompts: int, seconds: float) -> dict:
    values = sorted(ttfts)
    n = len(values)
    lo, hi = p95_interval(values)
    return {
        "n": n,
        "long_prompts": long_prompts,
        "seconds": seconds,
        # Linear interpolation between order statistics, as numpy's and PostgreSQL's percentile_cont.
        "p50_ms": float(np.percentile(values, 50)) if n else None,
        "p95_ms": float(np.percentile(values, QUANTILE * 100)) if n else None,
        "p95_low_ms": lo,
        "p95_high_ms": hi,
        "enough": n >= MIN_SAMPLES,
        "bar_pct": 0,
    }


def route_isolation_ttft(
    *, route: ModelRoute, since: dt.datetime, until: dt.datetime, short_at_most: int | None = None
) -> dict:
    """Short requests' TTFT with and without isolation on ``route`` over ``[since, until)``.

    A request is short when its prompt (the engine's count) is at most ``short_at_most`` tokens:
    by default the threshold in force now, else the last one the window saw, so both sides are cut
    at the same size. Only successful requests with a first token count. ``ratio`` is isolated p95
    over shared p95 (below 1: isolation helped), None unless both sides have ``MIN_SAMPLES``.
    ``reason`` says why there is no figure."""
    periods = threshold_periods(route=route, since=since, until=until)
    if short_at_most is None:
        short_at_most = route.long_context_threshold_tokens or next(
            (p.threshold for p in reversed(periods) if p.isolated), None
        )
    out = {
        "since": since,
        "until": until,
        "short_at_most": short_at_most,
        "periods": periods,
        "min_samples": MIN_SAMPLES,
        "truncated": False,
        "isolated": _side([], 0, sum(p.seconds for p in periods if p.isolated)),
        "shared": _side([], 0, sum(p.seconds for p in periods if not p.isolated)),
        "ratio": None,
        "reason": "",
    }
    if short_at_most is None:
        out["reason"] = (
            "The route did not isolate long prompts in this window: no threshold to compare around."
        )
        return out
    samples = usage_route_samples(
        public_model=route.public_name, since=since, until=until, limit=SAMPLE_LIMIT
    )
    out["truncated"] = len(samples) >= SAMPLE_LIMIT
    starts = [p.start for p in periods]
    ttfts: dict[bool, list[float]] = {True: [], False: []}
    longs = {True: 0, False: 0}
    for s in samples:
        isolated = periods[bisect.bisect_right(starts, s["started_at"]) - 1].isolated
        if s["prompt_tokens"] > short_at_most:
            longs[isolated] += 1
        elif s["status"] == "ok" and s["ttft_ms"] is not None:
            ttfts[isolated].append(s["ttft_ms"])
    for key, isolated in (("isolated", True), ("shared", False)):
        out[key] = _side(ttfts[isolated], longs[isolated], out[key]["seconds"])
    iso, shared = out["isolated"], out["shared"]
    top = max(iso["p95_ms"] or 0.0, shared["p95_ms"] or 0.0)
    for side in (iso, shared):  # the bars of the page's small chart, as a share of the longer one
        side["bar_pct"] = round(100 * side["p95_ms"] / top) if top and side["p95_ms"] is not None else 0
    if not (iso["enough"] and shared["enough"]):
        out["reason"] = (
            f"Not enough data: {iso['n']} short requests with isolation and {shared['n']} without in this "
            f"window; a p95 needs {MIN_SAMPLES} on each side."
        )
    elif shared["p95_ms"] > 0:
        out["ratio"] = iso["p95_ms"] / shared["p95_ms"]
    return out
