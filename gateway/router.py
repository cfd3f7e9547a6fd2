"""Weighted routing with stickiness, pools and passive ejection.

Sticky requests (a ``user`` field or a session header) use weighted rendezvous hashing: the same
key keeps landing on the same deployment while it is healthy, moves only when it is ejected or its
weight changes, and the shares still follow the weights. Others pick at random by weight.
Only targets whose health is known and good get traffic: the snapshot's status must be RUNNING (the
console publishes UNKNOWN until Ray has been heard from since the platform started), and a deployment
that refused a connection or answered 5xx is ejected for ``eject_s`` seconds, then gets traffic again
(passive recovery). When none is left the gateway answers 503 with ``Retry-After``
(``retry_after_s``) instead of sending the request somewhere that is known or likely to fail.
"""

from __future__ import annotations

import hashlib
import math
import random
import time

from snapshot.contract import Route, Target

LONG_POOL = "long-context"


class Router:
    """Chooses a target for a request; remembers recent failures per deployment."""

    def __init__(self, eject_s: float) -> None:
        self.eject_s = eject_s
        # Keyed by deployment and address: a deployment republished at a new address starts healthy.
        self._ejected_until: dict[tuple[int, str], float] = {}

    def mark_failed(self, target: Target) -> None:
        self._ejected_until[(target.deployment_id, target.base_url)] = time.monotonic() + self.eject_s

    def mark_ok(self, target: Target) -> None:
        if self._ejected_until:
            self._ejected_until.pop((target.deployment_id, target.base_url), None)

    def is_ejected(self, target: Target) -> bool:
        key = (target.deployment_id, target.base_url)
        until = self._ejected_until.get(key)
        if until is None:
            return False
        if until <= time.monotonic():
            del self._ejected_until[key]
            return False
        return True

    def candidates(self, route: Route, prompt_tokens: int) -> list[Target]:
        """RUNNING, not ejected targets with weight, in the right pool.

        Prompts over the route's threshold go to the ``long-context`` pool when it has a healthy
        target; everything else goes to the other pools, and to the long-context pool only when
        nothing else is healthy (it can serve short prompts too, just at a higher cost).
        """
        running = [
            t for t in route.targets if t.status == "RUNNING" and t.weight > 0 and not self.is_ejected(t)
        ]
        thr = route.long_context_threshold
        long_pool = [t for t in running if t.pool == LONG_POOL]
        if thr and prompt_tokens > thr and long_pool:
            return long_pool
        short = [t for t in running if t.pool != LONG_POOL]
        return short or long_pool

    def retry_after_s(self, targets: list[Target]) -> int:
        """Seconds a client should wait when none of ``targets`` is healthy: until the first
        ejection ends, or ``eject_s`` while the statuses are unknown or failing (the console
        republishes as soon as Ray reports a change)."""
        now = time.monotonic()
        ends = [
            self._ejected_until[(t.deployment_id, t.base_url)] - now
            for t in targets
            if t.status == "RUNNING" and (t.deployment_id, t.base_url) in self._ejected_until
        ]
        wait = min((e for e in ends if e > 0), default=self.eject_s)
        return max(1, math.ceil(wait))

    def pick(
        self, candidates: list[Target], sticky: str | None, exclude: set[int] | None = None
    ) -> Target | None:
        """One target by weight among those not ejected; ``exclude`` drops ones already tried."""
        pool = [t for t in candidates if not exclude or t.deployment_id not in exclude]
        if self._ejected_until:
            pool = [t for t in pool if not self.is_ejected(t)]
        if not pool:
            return None
        if len(pool) == 1:
            return pool[0]
        if sticky:
            best, best_score = None, math.inf
            for t in pool:
                h = hashlib.blake2b(f"{sticky}|{t.deployment_id}".encode(), digest_size=8).digest()
                u = (int.from_bytes(h, "big") + 1) / 2.0**64
                score = -math.log(u) / t.weight
                if score < best_score:
                    best, best_score = t, score
            return best
        return random.choices(pool, weights=[t.weight for t in pool])[0]
