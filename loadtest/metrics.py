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
