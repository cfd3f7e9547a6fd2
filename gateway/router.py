"""Weighted routing with stickiness, pools and passive ejection.

Sticky requests (a ``user`` field or a session header) use weighted rendezvous hashing: the same
key keeps landing on the same deployment while it is healthy, moves only when it is ejected or its
weight changes, and the shares still follow the weights. Others pick at random by weight.
A deployment that refused a connection or answered 5xx is ejected for ``eject_s`` seconds and then
gets traffic again (passive recovery); if every target is ejected we try them anyway rather than fail.
"""

from __future__ import annotations

import hashlib
import math
import random
import time

from gateway.snapshot import Route, Target

LONG_POOL = "long-context"


class Router:
    """Chooses a target for a request; remembers recent failures per deployment."""

    def __init__(self, eject_s: float) -> None:
        self.eject_s = eject_s
        self._ejected_until: dict[int, float] = {}

    def mark_failed(self, target: Target) -> None:
        self._ejected_until[target.deployment_id] = time.monotonic() + self.eject_s

    def mark_ok(self, target: Target) -> None:
        if self._ejected_until:
            self._ejected_until.pop(target.deployment_id, None)

    def is_ejected(self, deployment_id: int) -> bool:
        until = self._ejected_until.get(deployment_id)
        if until is None:
            return False
        if until <= time.monotonic():
            del self._ejected_until[deployment_id]
            return False
        return True

    def candidates(self, route: Route, prompt_tokens: int) -> list[Target]:
        """RUNNING targets with weight, in the right pool.

        Prompts over the route's threshold go to the ``long-context`` pool when it has a running
        target; everything else goes to the other pools, and to the long-context pool only when
        nothing else runs (it can serve short prompts too, just at a higher cost).
        """
        running = [t for t in route.targets if t.status == "RUNNING" and t.weight > 0]
        thr = route.long_context_threshold
        long_pool = [t for t in running if t.pool == LONG_POOL]
        if thr and prompt_tokens > thr and long_pool:
            return long_pool
        short = [t for t in running if t.pool != LONG_POOL]
        return short or long_pool

    def pick(
        self, candidates: list[Target], sticky: str | None, exclude: set[int] | None = None
    ) -> Target | None:
        """One target by weight, healthy first; ``exclude`` drops ones already tried."""
        pool = [t for t in candidates if not exclude or t.deployment_id not in exclude]
        if not pool:
            return None
        if self._ejected_until:
            healthy = [t for t in pool if not self.is_ejected(t.deployment_id)]
            if healthy:
                pool = healthy
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
