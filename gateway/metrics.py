"""Prometheus metrics of the gateway.

With ``--workers N`` the CLI sets ``PROMETHEUS_MULTIPROC_DIR`` before workers start, and
``/metrics`` aggregates every worker's files. Labelled children are cached in dicts because
``labels()`` on every request shows up in the profile.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

MULTIPROC = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
REGISTRY = CollectorRegistry() if not MULTIPROC else None
_kw = {"registry": REGISTRY} if REGISTRY is not None else {}

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)

REQUESTS = Counter(
    "gateway_requests_total", "Requests answered, by public model and HTTP status", ["model", "status"], **_kw
)
ERRORS = Counter("gateway_errors_total", "Errors by type", ["type"], **_kw)
REJECTIONS = Counter(
    "gateway_rejections_total", "Requests rejected before forwarding, by reason", ["reason"], **_kw
)
TTFT = Histogram(
    "gateway_time_to_first_token_seconds",
    "Time to first token seen by the gateway",
    ["model", "deployment"],
    buckets=LATENCY_BUCKETS,
    **_kw,
)
TPOT = Histogram(
    "gateway_time_per_output_token_seconds",
    "Time per output token after the first",
    ["model", "deployment"],
    buckets=TPOT_BUCKETS,
    **_kw,
)
E2E = Histogram(
    "gateway_e2e_request_latency_seconds",
    "End-to-end latency of forwarded requests",
    ["model", "deployment"],
    buckets=LATENCY_BUCKETS,
    **_kw,
)
IN_FLIGHT = Gauge(
    "gateway_in_flight_requests", "Requests being forwarded", **({"multiprocess_mode": "livesum"} | _kw)
)
TOKENS = Counter("gateway_tokens_total", "Tokens metered", ["model", "kind"], **_kw)
SNAPSHOT_VERSION = Gauge(
    "gateway_snapshot_version",
    "Version of the config snapshot in use",
    **({"multiprocess_mode": "max"} | _kw),
)

_children: dict[tuple, object] = {}


def child(metric, *labels):
    """Cached ``metric.labels(*labels)``."""
    key = (id(metric), *labels)
    c = _children.get(key)
    if c is None:
        c = _children[key] = metric.labels(*labels)
    return c


def render() -> tuple[bytes, str]:
    """The exposition text for /metrics."""
    if MULTIPROC:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
