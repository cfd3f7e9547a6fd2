"""The request context: one object per request, filled in stage by stage and read by the hooks.

Each stage writes only its own fields (grouped below by the stage that sets them) and reads what
earlier stages wrote; a hook sees the same object at its point (``gateway/hooks.py`` says which
fields it may change). What admission takes is one object, ``hold``: ``None`` until the request is
admitted, and from then on the request must settle (docs/decisions/0014, 0025).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapshot.contract import KeyInfo, Route, Snapshot, Target, TenantInfo


@dataclass(slots=True)
class Hold:
    """What admission took for one request, and everything settling it needs.

    ``amount`` is the worst-case cost held against the hard cap (nano-dollars; 0 without a cap),
    ``cap`` the cap (-1: none), ``tokens_est`` the tokens counted in the tokens/min windows.
    ``recorded``: the request has an entry in this worker's ledger (False only when Redis was down
    and nothing needed checking)."""

    event_id: uuid.UUID
    amount: int
    cap: int
    tokens_est: int
    in_p: int
    out_p: int
    price_id: int | None
    period_key: str
    seed: int
    ttl: int
    limited: bool
    recorded: bool


class RequestContext:
    """One request on its way through the stages."""

    __slots__ = (
        "kind", "t0", "started_at",
        # authenticate
        "key", "tenant", "session", "raw", "class_header",
        # parse
        "body", "model", "stream", "max_tokens", "choices", "wants_usage", "prompt_est", "prompt_bound",
        "longest_ids", "traffic_class",
        # route
        "snapshot", "route", "candidates", "sticky",
        # admit
        "hold", "rl_headers",
        # forward
        "target", "fw", "ttft", "response_body", "response_chunks",
        # settle
        "prompt_tokens", "completion_tokens", "cached_tokens", "usage_estimated", "status", "error_type",
        "http_status", "settled", "committed",
        # a semantic cache hit (docs/semantic-cache.md): what the model would have cost beyond it
        "cache_hit", "saved_nanos",
        # free for hooks: what one hook leaves for its own later point (or another hook)
        "state",
    )  # fmt: skip

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "chat", "text", "embeddings", "responses"
        self.t0 = time.perf_counter()
        self.started_at = time.time()
        self.key: KeyInfo | None = None
        self.tenant: TenantInfo | None = None
        self.session: bytes | None = None
        self.raw = b""
        self.class_header: bytes | None = None
        self.body: dict | None = None
        self.model = ""
        self.stream = False
        self.max_tokens = 0
        self.choices = 1
        self.wants_usage = False
        self.prompt_est = 0
        self.prompt_bound: int | None = None
        self.longest_ids: int | None = None
        self.traffic_class = "standard"
        self.snapshot: Snapshot | None = None
        self.route: Route | None = None
        self.candidates: list[Target] = []
        self.sticky: str | None = None
        self.hold: Hold | None = None
        self.rl_headers: list = []
        self.target: Target | None = None
        self.fw = None
        self.ttft: float | None = None
        self.response_body: bytes | None = None
        self.response_chunks: list[bytes] | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.usage_estimated = False
        self.status = "ok"
        self.error_type = ""
        self.http_status = 200
        self.settled = False
        self.committed = False
        self.cache_hit = False
        self.saved_nanos = 0
        self.state: dict = {}

    def headers(self) -> list:
        """The headers of an admitted request's answer: its event id, rate limits, the deployment
        and its pool (``long-context`` for a prompt isolated there, ADR 0039)."""
        h = [
            (b"x-request-id", self.hold.event_id.hex.encode()),
            (b"x-governor-traffic-class", self.traffic_class.encode()),
            *self.rl_headers,
        ]
        if self.target is not None:
            h.append((b"x-governor-deployment", self.target.slug.encode()))
            h.append((b"x-governor-pool", self.target.pool.encode()))
        if self.state.get("route_reason"):  # a router policy chose the version (ADR 0040)
            h.append((b"x-governor-routed", (self.state["routed"] or "default").encode()))
            h.append((b"x-governor-route-reason", self.state["route_reason"].encode()))
        return h

    def delivered_tokens(self) -> int | None:
        """Completion tokens the client was sent so far (None before any output went out)."""
        fw = self.fw
        if fw is None or fw.events == 0:
            return None
        # vLLM sends one role chunk, then one chunk per token.
        return max(0, fw.events - 1)

    def progress(self) -> dict | None:
        """What the ledger's journal records for a reaper: delivered tokens and their deployment."""
        n = self.delivered_tokens()
        if n is None:
            return None
        tg = self.target
        return {"n": n, "d": tg.deployment_id, "s": tg.slug, "v": tg.version_id, "p": tg.pool}
