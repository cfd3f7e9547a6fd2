"""Weighted routing with stickiness, pools and passive ejection.

Sticky requests (a ``user`` field or a session header) use weighted rendezvous hashing: the same
key keeps landing on the same deployment while it is healthy, moves only when it is ejected or its
weight changes, and the shares still follow the weights. Others pick at random by weight.
Only targets whose health is known and good get traffic: the snapshot's status must be RUNNING (the
console publishes UNKNOWN until Ray has been heard from since the platform started), and a deployment
that refused a connection or answered 5xx is ejected for ``eject_s`` seconds, then gets traffic again
(passive recovery). When none is left the gateway answers 503 with ``Retry-After``
(``retry_after_s``) instead of sending the request somewhere that is known or likely to fail.

**Long-request isolation** (docs/decisions/0039): a route with a ``long_context_threshold`` sends
prompts above it to its ``long-context`` pool, so that their long prefills do not hold up everyone
else's first token. The threshold is in the engine's tokens, and the gateway has no tokenizer: its
estimate (``gateway.validation.estimate_prompt_tokens``) leans high on purpose, about a third for
English, so compared with the threshold as it is it would send prompts of three quarters of the
threshold to the long pool. The router therefore learns, per public model and endpoint, the ratio
of the prompt tokens the engines reported to the estimate (``observe_prompt``, from every answer
that carried usage) and compares the threshold with the estimate times that ratio
(``prompt_tokens``); until it has heard enough answers it uses the estimate as it is, which errs
towards the long pool, the side that can hold the prompt.
"""

from __future__ import annotations

import hashlib
import math
import random
import time

from snapshot.contract import Route, Target

LONG_POOL = "long-context"
# The learned ratio of engine-counted to estimated prompt tokens: each answer's weight decays by this
# factor per later answer (about the last 50 answers count), it is used once this many answers were
# heard, and kept within these bounds whatever an engine reports.
PROMPT_RATIO_DECAY = 0.98
PROMPT_RATIO_MIN_ANSWERS = 8
PROMPT_RATIO_BOUNDS = (0.25, 2.0)


class _PromptRatio:
    """Decayed sums of engine-counted and estimated prompt tokens: their quotient weighs each
    answer by its size, so long prompts (the ones the threshold is about) dominate it."""

    __slots__ = ("counted", "estimated", "answers")

    def __init__(self) -> None:
        self.counted = 0.0
        self.estimated = 0.0
        self.answers = 0


class Router:
    """Chooses a target for a request; remembers recent failures per deployment."""

    def __init__(self, eject_s: float) -> None:
        self.eject_s = eject_s
        # Keyed by deployment and address: a deployment republished at a new address starts healthy.
        self._ejected_until: dict[tuple[int, str], float] = {}
        self._prompt_ratio: dict[tuple[str, str], _PromptRatio] = {}

    def observe_prompt(self, model: str, kind: str, estimated: int, counted: int) -> None:
        """An answer's engine-reported prompt tokens next to the gateway's estimate for it."""
        if estimated <= 0 or counted <= 0:
            return
        r = self._prompt_ratio.get((model, kind))
        if r is None:
            r = self._prompt_ratio[(model, kind)] = _PromptRatio()
        r.counted = r.counted * PROMPT_RATIO_DECAY + counted
        r.estimated = r.estimated * PROMPT_RATIO_DECAY + estimated
        r.answers += 1

    def prompt_ratio(self, model: str, kind: str) -> float | None:
        """The learned engine-counted / estimated ratio, or None before enough answers."""
        r = self._prompt_ratio.get((model, kind))
        if r is None or r.answers < PROMPT_RATIO_MIN_ANSWERS:
            return None
        lo, hi = PROMPT_RATIO_BOUNDS
        return min(hi, max(lo, r.counted / r.estimated))

    def prompt_tokens(self, model: str, kind: str, estimated: int) -> int:
        """The prompt's size in the engine's tokens, as well as the gateway can tell: what the
        long-context threshold is compared with."""
        ratio = self.prompt_ratio(model, kind)
        return estimated if ratio is None else round(estimated * ratio)

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

    def candidates(
        self,
        route: Route,
        prompt_tokens: int,
        targets: list[Target] | None = None,
        *,
        needs_tokens: int = 0,
    ) -> list[Target]:
        """RUNNING, not ejected targets with weight, in the right pool.

        ``targets``: those of the route's targets that serve the request's endpoint (default: all),
        filtered before a pool is chosen, so a long pool that cannot serve the endpoint does not
        hide one that can. ``needs_tokens``: the prompt by the leaning-high estimate, the context the
        request cannot do without; a target whose ``max_model_len`` is smaller would refuse it (vLLM
        refuses a prompt longer than its context and cuts the output to what is left of it).

        - A prompt over the route's threshold goes to the ``long-context`` pool when it has a
          healthy target. When it has none (down, ejected, drained), the prompt goes to the other
          pools rather than fail: the route serves as it did before isolation until the long pool is
          back. A long pool that is merely full is not left: admission control queues or sheds the
          prompt there (``gateway.admission``), so a flood of long prompts never spills onto the
          pool that isolation protects.
        - Any other prompt goes to the other pools' targets that can hold it; to the long-context
          pool only when none of them can (or none is healthy): it can serve short prompts too,
          just at a higher cost.
        """
        running = [
            t
            for t in (route.targets if targets is None else targets)
            if t.status == "RUNNING" and t.weight > 0 and not self.is_ejected(t)
        ]
        long_pool = [t for t in running if t.pool == LONG_POOL]
        short = [t for t in running if t.pool != LONG_POOL]
        if not long_pool:
            return short
        thr = route.long_context_threshold
        if thr and prompt_tokens > thr:
            return long_pool
        fitting = [t for t in short if t.max_model_len is None or needs_tokens <= t.max_model_len]
        return fitting or long_pool

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
