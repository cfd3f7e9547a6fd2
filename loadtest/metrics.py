"""Per-stage figures from request records, exactly as docs/domain.md defines them (vLLM bench serve's).

- TTFT: first chunk carrying a choice minus send time. ITL: every gap between consecutive content
  chunks, pooled. TPOT: ``(e2e - ttft) / (output_tokens - 1)`` when output_tokens > 1.
  E2E: last content chunk minus send time. Latencies are over successful requests only.
- Throughputs are over the whole stage including its tail: from the first planned send to the
  last response byte.
- Goodput under an SLA: a request is good when it succeeded and meets every limit; request
  goodput = good / duration, token goodput = output tokens of good requests / duration (total-token
  goodput adds their prompt tokens), attainment = good / all, errors included.
- Schedule delay: how late the client sent each request versus its plan; a median above 10 ms
  means the run measured the client, and the summary says so loudly.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from .records import ERROR_TYPES, RequestRecord

SCHEDULE_DELAY_LIMIT_MS = 10.0
# The sent workload must be the named one: mean actual vs requested lengths, and the achieved
# offered rate vs the named rate, may differ by at most this much before the report says so.
WORKLOAD_TOLERANCE_PCT = 2.0
PERCENTILES = (50, 90, 95, 99)
CLIENT_BOUND_WARNING = (
    "CLIENT-BOUND: median schedule delay {median:.1f} ms > 10 ms. The client sent requests late, "
    "so this stage measured the load generator, not the server. Use more client processes or a lower rate."
)


@dataclass(frozen=True, slots=True)
class Sla:
    """Per-request limits in milliseconds; ``None`` means no limit on that metric."""

    ttft_ms: float | None = 1000.0
    tpot_ms: float | None = 50.0
    e2e_ms: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Sla:
        d = d or {}
        return cls(
            **{
                k: (None if d.get(k) in (None, "") else float(d[k]))
                for k in ("ttft_ms", "tpot_ms", "e2e_ms")
                if k in d
            }
        )

    def met_by(self, rec: RequestRecord) -> bool:
        """Good = succeeded and within every limit. TPOT is only defined with > 1 output token."""
        if not rec.ok:
            return False
        ttft = rec.ttft_s
        if self.ttft_ms is not None and (ttft is None or ttft * 1e3 > self.ttft_ms):
            return False
        tpot = rec.tpot_s
        if self.tpot_ms is not None and tpot is not None and tpot * 1e3 > self.tpot_ms:
            return False
        e2e = rec.e2e_s
        return not (self.e2e_ms is not None and (e2e is None or e2e * 1e3 > self.e2e_ms))

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"TTFT ≤ {self.ttft_ms:g} ms")
        if self.tpot_ms is not None:
            parts.append(f"TPOT ≤ {self.tpot_ms:g} ms")
        if self.e2e_ms is not None:
            parts.append(f"E2E ≤ {self.e2e_ms:g} ms")
        return " and ".join(parts) or "no limits"


def distribution_ms(values_s: list[float] | np.ndarray) -> dict:
    """mean / p50 (= median) / p90 / p95 / p99 / min / max / std in milliseconds, n included."""
    arr = np.asarray(values_s, dtype=float) * 1e3
    if arr.size == 0:
        return {
            "n": 0,
            "mean": None,
            "median": None,
            "p50": None,
            "p90": None,
            "p95": None,
            "p99": None,
            "min": None,
            "max": None,
            "std": None,
        }
    pct = np.percentile(arr, PERCENTILES)
    out = {"n": int(arr.size), "mean": float(arr.mean())}
    out["median"] = float(pct[0])
    for p, v in zip(PERCENTILES, pct, strict=True):
        out[f"p{p}"] = float(v)
    out.update(min=float(arr.min()), max=float(arr.max()), std=float(arr.std()))
    return out


def histogram_ms(values_s: list[float], *, bins: int = 30) -> dict:
    """Bin edges and counts for the distribution charts (robust to an empty list)."""
    arr = np.asarray(values_s, dtype=float) * 1e3
    if arr.size == 0:
        return {"edges": [], "counts": []}
    hi = float(np.percentile(arr, 99.5)) if arr.size > 20 else float(arr.max())
    lo = float(arr.min())
    if hi - lo < 1e-3:  # all (nearly) equal: one visible bar instead of a numpy error
        hi = lo + 1.0
    counts, edges = np.histogram(np.clip(arr, lo, hi), bins=bins, range=(lo, hi))
    return {"edges": [round(float(e), 3) for e in edges], "counts": [int(c) for c in counts]}


def summarize(records: list[RequestRecord], *, sla: Sla, offered: dict | None = None) -> dict:
    """All figures of one stage as plain JSON-able data."""
    n = len(records)
    ok = [r for r in records if r.ok]
    errors = Counter(r.error for r in records if not r.ok)
    if records:
        start = min(r.planned_s for r in records)
        end_candidates = [r.chunk_s[-1] for r in records if r.chunk_s] + [r.sent_s for r in records]
        end = max(end_candidates)
        duration = max(end - start, 1e-9)
    else:
        duration = 0.0

    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [t for r in ok if (t := r.tpot_s) is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    itl: list[float] = []
    for r in ok:
        itl.extend(r.itl_s())
    delays = [r.schedule_delay_s for r in records if r.sent_s]

    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    good = [r for r in records if sla.met_by(r)]
    good_out = sum(r.output_tokens for r in good)
    good_in = sum(r.prompt_tokens for r in good)

    def per_s(x: float) -> float:
        return x / duration if duration else 0.0

    delay = distribution_ms(delays)
    warnings: list[str] = []
    client_bound = bool(delay["median"] is not None and delay["median"] > SCHEDULE_DELAY_LIMIT_MS)
    if client_bound:
        warnings.append(CLIENT_BOUND_WARNING.format(median=delay["median"]))
    if errors:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(errors.items()))
        warnings.append(f"{n - len(ok)} of {n} requests failed ({detail}); they count as not good.")
    usage_missing = sum(1 for r in ok if r.usage_missing)
    if usage_missing:
        warnings.append(
            f"{usage_missing} responses carried no usage; their token counts were estimated from chunks."
        )

    return {
        "offered": offered or {},
        "requests": n,
        "completed": len(ok),
        "failed": n - len(ok),
        "error_rate": (n - len(ok)) / n if n else 0.0,
        "errors": {k: errors.get(k, 0) for k in ERROR_TYPES if errors.get(k)},
        "error_samples": _error_samples(records),
        "duration_s": duration,
        "input_tokens": in_tokens,
        "output_tokens": out_tokens,
        "usage_missing": usage_missing,
        "request_throughput": per_s(len(ok)),
        "output_token_throughput": per_s(out_tokens),
        "total_token_throughput": per_s(out_tokens + in_tokens),
        "ttft_ms": distribution_ms(ttft),
        "tpot_ms": distribution_ms(tpot),
        "itl_ms": distribution_ms(itl),
        "e2e_ms": distribution_ms(e2e),
        "schedule_delay_ms": delay,
        "client_bound": client_bound,
        "sla": sla.to_dict(),
        "good_requests": len(good),
        "attainment": len(good) / n if n else 0.0,
        "request_goodput": per_s(len(good)),
        "token_goodput": per_s(good_out),
        "total_token_goodput": per_s(good_out + good_in),
        "histograms": {"ttft_ms": histogram_ms(ttft), "tpot_ms": histogram_ms(tpot)},
        "warnings": warnings,
    }


def _error_samples(records: list[RequestRecord], *, per_type: int = 3) -> dict[str, list[str]]:
    samples: dict[str, list[str]] = {}
    for r in records:
        if r.error and len(samples.setdefault(r.error, [])) < per_type:
            samples[r.error].append(r.detail)
    return samples


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN/inf; stored reports use null instead."""
    if x is None or not math.isfinite(x):
        return None
    return x


def _length_stats(values: list[int]) -> dict:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "min": None, "max": None}
    p50, p90 = np.percentile(arr, (50, 90))
    return {
        "n": int(arr.size),
        "mean": float(arr.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "min": int(arr.min()),
        "max": int(arr.max()),
    }


def _pct(actual: float | None, wanted: float | None) -> float | None:
    if actual is None or not wanted:
        return None
    return (actual - wanted) / wanted * 100.0


def length_report(records: list[RequestRecord], planned: list, *, source: str, described: str = "") -> dict:
    """Requested vs actual input and output tokens of the requests that succeeded.

    ``planned`` holds the stage's ``PlannedRequest``s (``prompt_tokens`` and ``max_tokens`` are what
    was asked); actual counts are the server's ``usage``. A mean off by more than 2 % is a warning:
    the stage then did not send the workload it names.
    """
    by_index = {p.index: p for p in planned}
    sent = [r for r in records if r.ok and r.index in by_index and not r.usage_missing]
    out: dict = {"source": source, "source_detail": described, "warnings": []}
    for name, want_of, got_of in (
        ("input", lambda p: p.prompt_tokens, lambda r: r.prompt_tokens),
        ("output", lambda p: p.max_tokens, lambda r: r.output_tokens),
    ):
        requested = _length_stats([want_of(by_index[r.index]) for r in sent])
        actual = _length_stats([got_of(r) for r in sent])
        err = _pct(actual["mean"], requested["mean"])
        out[name] = {"requested": requested, "actual": actual, "mean_error_pct": err}
        if err is not None and abs(err) > WORKLOAD_TOLERANCE_PCT:
            out["warnings"].append(
                f"LENGTH MISMATCH: mean actual {name} {actual['mean']:.1f} tokens vs requested "
                f"{requested['mean']:.1f} ({err:+.1f} % > {WORKLOAD_TOLERANCE_PCT:g} %): this stage did not "
                f"send the {name} lengths it names (token counts from {source})."
            )
    return out


def offered_rate_report(
    records: list[RequestRecord], planned: list, *, named_rate: float, window_s: float
) -> dict:
    """Named, planned and achieved offered rate of an open-loop stage.

    The planned offered rate is ``N / window`` (the schedule's convention, ``engines.workload``).
    The achieved one is the planned rate divided by the slope of actual against planned send times
    (Theil-Sen: the median of pairwise slopes): a client that keeps its schedule has slope 1, one
    that falls steadily behind stretches the window by the slope. A robust slope rather than first
    and last send, so that a few late sends (a connection being opened, a GC pause) do not pass
    for a changed rate.
    """
    # A request that never went out has no send time (0.0) and an error; one sent at t = 0 is kept.
    sent = sorted((r for r in records if r.sent_s or not r.error), key=lambda r: r.planned_s)
    n = len(planned)
    planned_rate = n / window_s if window_s > 0 else None
    achieved = None
    if planned_rate is not None and len(sent) >= 3:
        x = np.array([r.planned_s for r in sent])
        y = np.array([r.sent_s for r in sent])
        if len(x) > 400:  # pairwise slopes are O(n^2): an even subsample keeps the estimate cheap
            pick = np.linspace(0, len(x) - 1, 400).astype(int)
            x, y = x[pick], y[pick]
        i, j = np.triu_indices(len(x), k=1)
        dx = x[j] - x[i]
        keep = dx > 1e-9
        if keep.any():
            slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
            achieved = planned_rate * len(sent) / n / max(slope, 1e-9)
    err = _pct(achieved, named_rate)
    figures = {
        "named_rate": named_rate,
        "planned_offered_rate": planned_rate,
        "achieved_offered_rate": achieved,
        "offered_rate_error_pct": err,
        "window_s": window_s,
    }
    warnings = []
    if err is not None and abs(err) > WORKLOAD_TOLERANCE_PCT:
        warnings.append(
            f"RATE MISMATCH: achieved offered rate {achieved:.3g} req/s vs the named {named_rate:g} req/s "
            f"({err:+.1f} % > {WORKLOAD_TOLERANCE_PCT:g} %): the client did not offer the load this stage names."
        )
    return {"figures": figures, "warnings": warnings}
