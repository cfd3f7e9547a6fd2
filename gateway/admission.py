"""Admission control: what a deployment is sent at once, and who waits or is shed when it is full.

Each deployment with a limit (``Target.max_inflight``: the operator's, or the concurrency at which
its SLA held in its latest measured capacity benchmark) gets a gate in every gateway worker. A worker
takes its share of the limit (``ceil(limit / workers)``): the workers never send a deployment more
than its limit together, and no request waits on Redis to find out (docs/decisions/0035).

Per traffic class (``snapshot.contract.TRAFFIC_CLASSES``):

- a class may fill only its **share** of the limit (interactive all of it, standard 90 %, sheddable
  75 % by default), so under load there is always room that only more important traffic can take;
- when its share is full a request **waits** in one queue per gate ordered by class, then by arrival:
  a freed slot goes to the most important waiter, so no lower class is admitted while a higher one
  waits;
- a request that waited its class's **longest wait** (interactive 10 s, standard 2 s, sheddable 0.5 s
  by default) is **shed**: 503 ``overloaded`` with ``Retry-After``, committed like any admitted
  request (no cost, ``error_type`` ``shed_<class>``), so each refusal is metered with its reason.

What the engines report counts too (``gateway.engine_signals``): a deployment whose engine queues
more than a few requests or has filled most of its KV cache is **saturated**, and takes no
sheddable traffic until it recovers, whatever its in-flight count (a deployment without a limit
gets a gate for as long as it is saturated).

Before waiting, a request full on its picked deployment moves to another healthy deployment of its
candidates that has room for its class (the least loaded). The controller is per process and pure
asyncio: a gate is a counter and a heap.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.replies import Reply, error_reply
from snapshot.contract import CLASS_RANK, TRAFFIC_CLASSES

if TYPE_CHECKING:
    from gateway.engine_signals import EngineSignals
    from snapshot.contract import Target

DEFAULT_SHARES = {"interactive": 1.0, "standard": 0.9, "sheddable": 0.75}
DEFAULT_WAIT_S = {"interactive": 10.0, "standard": 2.0, "sheddable": 0.5}
# What a shed client is told to wait before retrying, per class: a batch client can come back later.
RETRY_AFTER_S = {"interactive": 1, "standard": 2, "sheddable": 10}
# The classes a saturated engine refuses (the Inference Extension sheds only sheddable requests).
HELD_BY_SATURATION = CLASS_RANK["sheddable"]
UNLIMITED = 1 << 30  # the limit of a gate that exists only because its engine is saturated


def parse_per_class(raw: str, default: dict[str, float], *, what: str) -> dict[str, float]:
    """``"1.0,0.9,0.75"`` (interactive, standard, sheddable) into a dict; ``""``: the defaults."""
    if not raw.strip():
        return dict(default)
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != len(TRAFFIC_CLASSES):
        raise ValueError(
            f"{what}: give {len(TRAFFIC_CLASSES)} values ({', '.join(TRAFFIC_CLASSES)}), not {raw!r}"
        )
    try:
        values = dict(zip(TRAFFIC_CLASSES, (float(p) for p in parts), strict=True))
    except ValueError:
        raise ValueError(f"{what}: values must be numbers, not {raw!r}") from None
    if any(v < 0 or not math.isfinite(v) for v in values.values()):
        raise ValueError(f"{what}: values must be finite and at least 0, not {raw!r}")
    return values


@dataclass
class Gate:
    """One deployment's share of its limit in this worker."""

    limit: int
    inflight: int = 0
    waiters: list = field(default_factory=list)  # heap of (rank, seq, future)
    shed: int = 0
    admitted: int = 0
    saturated: bool = False  # its engine says so (gateway.engine_signals)

    def room_for(self, rank: int, shares: tuple[float, ...]) -> bool:
        if self.saturated and rank >= HELD_BY_SATURATION:
            return False
        return self.inflight < max(1, math.floor(self.limit * shares[rank]))

    def admits(self, rank: int, shares: tuple[float, ...]) -> bool:
        """Room for class ``rank`` now, and nobody as important or more waits for it (the heap's top
        is the most important waiter: less important ones, held back by their share, do not block)."""
        return self.room_for(rank, shares) and (not self.waiters or self.waiters[0][0] > rank)


class Slot:
    """A place in a gate, held from admission to the end of forwarding; ``release`` is idempotent."""

    __slots__ = ("_controller", "_gate")

    def __init__(self, controller: AdmissionController | None, gate: Gate | None) -> None:
        self._controller, self._gate = controller, gate

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.inflight -= 1
            self._controller._drain(gate)


FREE = Slot(None, None)  # a deployment without a limit: nothing to hold


class AdmissionController:
    """The gates of one gateway worker."""

    def __init__(
        self,
        *,
        workers: int = 1,
        shares: dict[str, float] | None = None,
        wait_s: dict[str, float] | None = None,
        signals: EngineSignals | None = None,
    ) -> None:
        self.workers = max(1, workers)
        self.signals = signals
        s = shares or DEFAULT_SHARES
        w = wait_s or DEFAULT_WAIT_S
        self.shares = tuple(s[c] for c in TRAFFIC_CLASSES)
        self.wait_s = tuple(w[c] for c in TRAFFIC_CLASSES)
        self.gates: dict[int, Gate] = {}
        self._seq = itertools.count()

    def gate(self, target: Target) -> Gate | None:
        """This worker's gate for ``target`` (None: no limit and an engine that is not saturated).
        Follows the limit and the engine's saturation when they change."""
        limit = target.max_inflight
        saturated = self.signals is not None and self.signals.saturated(target.deployment_id)
        g = self.gates.get(target.deployment_id)
        if not limit and not saturated and (g is None or g.limit == UNLIMITED):
            if g is not None and g.saturated:
                g.saturated = False
                self._drain(g)
            return None
        share = max(1, -(-limit // self.workers)) if limit else UNLIMITED
        if g is None:
            g = self.gates[target.deployment_id] = Gate(share, saturated=saturated)
        elif g.limit != share or g.saturated != saturated:
            g.limit, g.saturated = share, saturated
            self._drain(g)
        return g

    def relieve(self, deployment_id: int) -> None:
        """The engine of ``deployment_id`` is no longer saturated: its waiters may go now."""
        g = self.gates.get(deployment_id)
        if g is not None and g.saturated:
            g.saturated = False
            self._drain(g)

    async def acquire(
        self, target: Target, candidates: list[Target], traffic_class: str
    ) -> tuple[Slot, Target] | Reply:
        """A slot on ``target`` or on a candidate with room, or a shed reply after the class's wait."""
        gate = self.gate(target)
        if gate is None:
            return FREE, target
        rank = CLASS_RANK[traffic_class]
        if gate.admits(rank, self.shares):
            return self._take(gate, rank), target
        # Full for this class here (or more important requests wait): another deployment with room.
        best = None
        for t in candidates:
            if t is target or t.deployment_id == target.deployment_id:
                continue
            g = self.gate(t)
            if g is None:
                return FREE, t
            if g.admits(rank, self.shares):
                load = g.inflight / g.limit
                if best is None or load < best[0]:
                    best = (load, g, t)
        if best is not None:
            return self._take(best[1], rank), best[2]
        wait = self.wait_s[rank]
        if wait > 0 and await self._wait(gate, rank, wait):
            return Slot(self, gate), target
        gate.shed += 1
        return shed_reply(traffic_class, wait)

    async def _wait(self, gate: Gate, rank: int, wait: float) -> bool:
        """Queue on ``gate`` for up to ``wait`` seconds; True when ``_drain`` counted this request in."""
        fut = asyncio.get_running_loop().create_future()
        entry = (rank, next(self._seq), fut)
        heapq.heappush(gate.waiters, entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, but the request is gone: give it back
                gate.inflight -= 1
                self._drain(gate)
            raise
        finally:
            if not fut.done():
                fut.cancel()
                gate.waiters.remove(entry)
                heapq.heapify(gate.waiters)
        return not fut.cancelled()

    def _take(self, gate: Gate, rank: int) -> Slot:
        self._admit(gate, rank)
        return Slot(self, gate)

    def _admit(self, gate: Gate, rank: int) -> None:
        """Count one request of class ``rank`` in: the one place a request is admitted."""
        gate.inflight += 1
        gate.admitted += 1

    def _drain(self, gate: Gate) -> None:
        """Hand freed room to the most important waiters their shares allow."""
        while gate.waiters:
            rank, _, fut = gate.waiters[0]
            if fut.done():  # gave up meanwhile
                heapq.heappop(gate.waiters)
                continue
            if not gate.room_for(rank, self.shares):
                return  # the most important waiter cannot go: nobody less important may
            heapq.heappop(gate.waiters)
            self._admit(gate, rank)
            fut.set_result(True)

    def stats(self) -> dict[int, dict]:
        """Per deployment: this worker's limit, in flight, waiting, admitted and shed so far."""
        return {
            d: {"limit": g.limit, "inflight": g.inflight, "waiting": len(g.waiters), "admitted": g.admitted,
                "shed": g.shed, "saturated": g.saturated}
            for d, g in self.gates.items()
        }  # fmt: skip


def shed_reply(traffic_class: str, waited_s: float) -> Reply:
    retry = RETRY_AFTER_S[traffic_class]
    return error_reply(
        503,
        f"the model's deployments are at capacity for {traffic_class} traffic"
        + (f" (waited {waited_s:g} s)" if waited_s else "")
        + f"; retry after {retry}s",
        "server_error",
        "overloaded",
        headers=[(b"retry-after", str(retry).encode())],
        reason=f"shed_{traffic_class}",
    )
