"""The two timing modes of the simulated engines, behind one ``Sink`` a request handler waits on.

* ``LiveEngine`` (simulated): one ``engines.scheduler.Scheduler`` runs steps in wall-clock time.
* ``FixedEngine`` (fixed): each running request's first token exactly ``ttft`` after it starts and
  each further token ``tpot`` after the previous one, up to ``max_num_seqs`` at once (FCFS).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable

from engines.metrics import Metrics
from engines.scheduler import RUNNING, WAITING, Request, Scheduler


class Sink:
    """What a request handler and the engine share: how many tokens are out, and whether it ended."""

    __slots__ = (
        "available",
        "done",
        "finish_reason",
        "waiter",
        "listener",
        "req",
        "arrival",
        "first_token",
        "last_token",
        "started",
        "token_times",
    )

    def __init__(self) -> None:
        self.available = 0
        self.done = False
        self.finish_reason = ""
        self.waiter: asyncio.Future | None = None
        # Called right inside wake() (from the engine's step or timer) when set: a streaming handler
        # writes its chunks there instead of waking a task per token.
        self.listener: Callable[[], None] | None = None
        self.req: Request | None = None
        self.arrival = 0.0
        self.first_token = -1.0
        self.last_token = -1.0
        # Fixed-timing mode: when the request got its slot, and (when the request asked for
        # ``governor_timings``) the engine's own monotonic time of each token.
        self.started = -1.0
        self.token_times: list[float] | None = None

    def wake(self) -> None:
        cb = self.listener
        if cb is not None:
            cb()
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.waiter = fut
        try:
            await fut
        finally:
            self.waiter = None


class LiveEngine:
    """Runs the scheduler in wall-clock time inside the current asyncio loop."""

    def __init__(self, scheduler: Scheduler, *, time_scale: float, metrics: Metrics) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.sched = scheduler
        scheduler.collect_emitted = True
        self.time_scale = time_scale
        self.metrics = metrics
        self.max_model_len = scheduler.max_model_len
        self.block_size = scheduler.block_size
        self._ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._resumed_seen = 0

    # state for /metrics
    num_running = property(lambda self: self.sched.num_running)
    num_waiting = property(lambda self: self.sched.num_waiting)
    kv_usage = property(lambda self: self.sched.kv_usage)
    prefix_queries = property(lambda self: self.sched.prefix_cache_queries)
    prefix_hits = property(lambda self: self.sched.prefix_cache_hits)
    preemptions = property(lambda self: self.sched.num_preemptions)
    prompt_tokens = property(lambda self: self.sched.prompt_tokens)
    generation_tokens = property(lambda self: self.sched.generation_tokens)

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> str | None:
        """Why a request cannot run at all (``None`` when it can)."""
        if math.ceil((prompt_tokens + max_tokens) / self.block_size) > self.sched.num_blocks:
            return "the request needs more KV cache blocks than the engine has"
        return None

    def ensure_started(self) -> None:
        # Ray Serve may run the lifespan and the requests on different loops: the engine lives on
        # the loop that serves requests.
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, *, prompt_tokens: int, max_tokens: int, hashes: list[int]) -> Sink:
        """Queue a request; the returned sink reports tokens as the scheduler produces them."""
        self.ensure_started()
        sink = Sink()
        now = time.monotonic()
        req = Request(next(self._ids), prompt_tokens, max_tokens, now, hashes, len(hashes), sink)
        sink.req = req
        sink.arrival = now
        self.sched.add_request(req)
        self._wake.set()  # type: ignore[union-attr]
        return sink

    def abort(self, sink: Sink) -> None:
        """The client went away: drop the request and free its KV blocks before the next step."""
        req = sink.req
        if req is not None and req.status in (WAITING, RUNNING) and not sink.done:
            self.sched.abort(req)
            sink.done = True
            sink.finish_reason = "abort"
            self.metrics.success["abort"] += 1
            self._wake.set()  # type: ignore[union-attr]

    async def _run(self) -> None:
        sched = self.sched
        metrics = self.metrics
        wake = self._wake
        assert wake is not None
        scale = self.time_scale
        deadline = 0.0
        while True:
            now = time.monotonic()
            plan = sched.schedule(now)
            if plan is None:
                wake.clear()
                await wake.wait()
                continue
            # Absolute deadlines keep long runs on schedule even when one sleep oversleeps.
            deadline = max(deadline, now) + plan.duration / scale
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let handlers run even when the CPU is behind
            end = time.monotonic()
            finished = sched.complete(end)
            gap = sched.step_dur[-1]
            n_dec = sched.step_ndec[-1]
            if n_dec:
                metrics.itl.observe(gap, n_dec)
            resumed = sched.resumed_gaps
            while self._resumed_seen < len(resumed):
                metrics.itl.observe(resumed[self._resumed_seen])
                self._resumed_seen += 1
            step = sched.step
            for req in sched.emitted:
                sink: Sink = req.sink  # type: ignore[assignment]
                if req.decoding:
                    sink.available = req.o0 + (step - req.s0)
                else:
                    sink.available = req.num_output
                if sink.first_token < 0:
                    sink.first_token = end
                    metrics.ttft.observe(end - req.arrival)
                    metrics.queue.observe(max(0.0, req.first_sched - req.arrival))
                sink.last_token = end
                sink.wake()
            for req in finished:
                sink = req.sink  # type: ignore[assignment]
                sink.available = req.num_output
                sink.done = True
                sink.finish_reason = req.finish_reason
                metrics.e2e.observe(end - req.arrival)
                sink.wake()


class FixedEngine:
    """Fixed TTFT/TPOT per request, at most ``max_num_seqs`` at once, FCFS queue for the rest.

    One timer drives every stream: it fires at the earliest due token, hands out every token that is
    due by then and re-arms for the next. No task per stream and no per-token sleep: at 500 paced
    streams that is 25,000 tokens a second, and a coroutine switch per token cost more CPU than the
    rest of the token's path together.
    """

    def __init__(self, *, ttft_s: float, tpot_s: float, max_num_seqs: int, max_model_len: int,
                 block_size: int, num_blocks: int, metrics: Metrics) -> None:  # fmt: skip
        if ttft_s < 0 or tpot_s < 0:
            raise ValueError("fixed timings must be >= 0")
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.metrics = metrics
        self.waiting: deque = deque()
        self.running: dict[int, tuple] = {}
        self._heap: list = []
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = math.inf
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self._blocks_used = 0
        self._sink_rid: dict[Sink, int] = {}

    num_running = property(lambda self: len(self.running))
    num_waiting = property(lambda self: len(self.waiting))
    kv_usage = property(lambda self: self._blocks_used / self.num_blocks if self.num_blocks else 0.0)

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> str | None:
        return None

    def ensure_started(self) -> None:
        # Ray Serve may run the lifespan and the requests on different loops: the timer lives on
        # the loop that serves requests.
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_due = math.inf
            self._loop = loop
            self._arm()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_due = math.inf
        self._loop = None

    def submit(self, *, prompt_tokens: int, max_tokens: int, hashes: list[int]) -> Sink:
        """Queue a request (FCFS behind ``max_num_seqs`` running ones); ``hashes`` are unused here."""
        self.ensure_started()
        sink = Sink()
        sink.arrival = time.monotonic()
        rid = next(self._ids)
        self.waiting.append((rid, sink, prompt_tokens, max_tokens))
        self._admit(sink.arrival)
        self._arm()
        return sink

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _admit(self, now: float) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            rid, sink, p, m = self.waiting.popleft()
            if sink.done:
                continue
            sink.req = None
            sink.started = now
            blocks = self._blocks(p + m)
            self._blocks_used += blocks
            self.running[rid] = (sink, p, m, blocks, now)
            self.metrics.queue.observe(now - sink.arrival)
            heapq.heappush(self._heap, (now + self.ttft_s, rid))
            self._sink_rid[sink] = rid

    def abort(self, sink: Sink) -> None:
        """The client went away: free its slot (running) or its place in the queue (waiting)."""
        if sink.done:
            return
        sink.done = True
        sink.finish_reason = "abort"
        self.metrics.success["abort"] += 1
        rid = self._sink_rid.pop(sink, None)
        if rid is not None and rid in self.running:
            _, _, _, blocks, _ = self.running.pop(rid)
            self._blocks_used -= blocks
            self._admit(time.monotonic())
            self._arm()
        else:
            # Still queued: drop it now so num_requests_waiting is right (a scan, but aborts are rare).
            for entry in self.waiting:
                if entry[1] is sink:
                    self.waiting.remove(entry)
                    break

    def _arm(self) -> None:
        """Make sure the timer fires when the earliest token is due (never before)."""
        heap = self._heap
        loop = self._loop
        if not heap or loop is None:
            return
        due = heap[0][0]
        if self._timer is not None:
            if self._timer_due <= due:
                return
            self._timer.cancel()
        self._timer_due = due
        # Whole milliseconds, rounded up: uvloop's timers have millisecond resolution and round to
        # the nearest one, which would wake us early and spin until the token is due.
        delay = math.ceil(max(0.0, due - time.monotonic()) * 1000) / 1000
        self._timer = loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_due = math.inf
        heap = self._heap
        running = self.running
        metrics = self.metrics
        tpot = self.tpot_s
        now = time.monotonic()
        pop, push = heapq.heappop, heapq.heappush
        # Each stream is woken once per tick, after all its due tokens: with no delay (TPOT 0) a
        # stream's tokens all come due together and leave in one write, not one write per token.
        woken: dict[Sink, None] = {}
        while heap and heap[0][0] <= now:
            t, rid = pop(heap)
            entry = running.get(rid)
            if entry is None:
                continue  # aborted
            sink, p, m, blocks, _start = entry
            sink.available += 1
            self.generation_tokens += 1
            if sink.token_times is not None:
                sink.token_times.append(now)
            if sink.available == 1:
                sink.first_token = now
                self.prompt_tokens += p
                metrics.ttft.observe(now - sink.arrival)
            else:
                metrics.itl.observe(now - sink.last_token)
            sink.last_token = now
            if sink.available >= m:
                sink.done = True
                sink.finish_reason = "length"
                metrics.e2e.observe(now - sink.arrival)
                del running[rid]
                self._sink_rid.pop(sink, None)
                self._blocks_used -= blocks
            else:
                # From the due time, not from now: timings stay exact even when the loop is late.
                push(heap, (t + tpot, rid))
            woken[sink] = None
        for sink in woken:
            sink.wake()
        self._admit(now)
        self._arm()
