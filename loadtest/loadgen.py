"""Drive one stage of load from one client process: open-loop by schedule, or closed-loop by concurrency.

A *stage* is one point of a ladder: a fixed offered rate (a schedule of send offsets) or a fixed
number of concurrent streams. Several client processes can share a stage; they agree on a wall
clock epoch and each sends its share, so their records merge on one time axis.

Run as ``python -m loadtest.loadgen`` it is such a client process: it reads its plan
(one JSON line) on stdin, says ``ready``, waits for the epoch line, runs, and writes its records
as one JSON line on stdout. Subprocesses rather than multiprocessing because Celery's prefork
children are daemonic and may not fork children of their own.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import orjson

from .client import Target, new_session, stream_request
from .records import RequestRecord

MODE_RATE = "rate"
MODE_CONCURRENCY = "concurrency"


@dataclass(slots=True)
class PlannedRequest:
    """One request of a schedule. ``offset_s`` is ignored in concurrency mode."""

    index: int
    offset_s: float
    prompt: str
    max_tokens: int
    prompt_tokens: int

    def to_row(self) -> list:
        return [self.index, self.offset_s, self.prompt, self.max_tokens, self.prompt_tokens]

    @classmethod
    def from_row(cls, row: list) -> PlannedRequest:
        return cls(*row)


@dataclass(slots=True)
class ProcessPlan:
    """What one client process sends in one stage."""

    target: Target
    mode: str
    requests: list[PlannedRequest]
    concurrency: int = 0  # this process's share, concurrency mode only
    duration_s: float = 0.0  # concurrency mode: start nothing new after this; 0 = until requests run out
    drain_s: float = 0.0  # give up on in-flight requests this long after the last send (0 = request timeout)

    def to_json(self) -> bytes:
        d = {
            "target": asdict(self.target),
            "mode": self.mode,
            "requests": [r.to_row() for r in self.requests],
            "concurrency": self.concurrency,
            "duration_s": self.duration_s,
            "drain_s": self.drain_s,
        }
        return orjson.dumps(d)

    @classmethod
    def from_json(cls, raw: bytes) -> ProcessPlan:
        d = orjson.loads(raw)
        return cls(
            target=Target(**d["target"]),
            mode=d["mode"],
            requests=[PlannedRequest.from_row(r) for r in d["requests"]],
            concurrency=d["concurrency"],
            duration_s=d["duration_s"],
            drain_s=d["drain_s"],
        )


@dataclass(slots=True)
class Clock:
    """Seconds since the stage epoch, from the monotonic clock, anchored once to the wall clock."""

    epoch_wall: float
    _perf0: float = field(default=0.0)
    _offset: float = field(default=0.0)

    def __post_init__(self) -> None:
        self._perf0 = time.perf_counter()
        self._offset = time.time() - self.epoch_wall

    def __call__(self) -> float:
        return time.perf_counter() - self._perf0 + self._offset


async def run_process_plan(plan: ProcessPlan, *, epoch_wall: float, progress=None) -> list[RequestRecord]:
    """Run one process's share of a stage; returns every record (errors included)."""
    clock = Clock(epoch_wall)
    records: list[RequestRecord] = []
    # The cyclic GC's full passes over thousands of live records pause the loop for tens of ms,
    # which would show up as schedule delay and late chunk timestamps. Automatic collection is off
    # for the stage; a young-generation pass each second still frees the short-lived cycles
    # (exceptions with their tracebacks), and a full pass runs after the stage.
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    sweeper = asyncio.ensure_future(_young_gc())
    try:
        await _run_plan(plan, clock, records, progress)
    finally:
        sweeper.cancel()
        if gc_was_enabled:
            gc.enable()
        gc.collect()
    records.sort(key=lambda r: r.index)
    return records


async def _young_gc() -> None:
    while True:
        await asyncio.sleep(1.0)
        gc.collect(1)


async def _run_plan(plan: ProcessPlan, clock: Clock, records: list[RequestRecord], progress) -> None:
    async with new_session(plan.target) as session:
        # Wait for the epoch with a coarse sleep, then let the schedule's own sleeps take over.
        lead = -clock()
        if lead > 0:
            await asyncio.sleep(lead)
        if plan.mode == MODE_RATE:
            await _run_rate(plan, session, clock, records, progress)
        else:
            await _run_concurrency(plan, session, clock, records, progress)


async def _one(plan, session, clock, req: PlannedRequest, planned_s: float) -> RequestRecord:
    rec = RequestRecord(index=req.index, planned_s=planned_s)
    return await stream_request(
        session,
        plan.target,
        rec,
        prompt=req.prompt,
        max_tokens=req.max_tokens,
        prompt_tokens_hint=req.prompt_tokens,
        clock=clock,
    )


async def _run_rate(plan: ProcessPlan, session, clock: Clock, records: list, progress) -> None:
    tasks: list[asyncio.Task] = []
    for req in plan.requests:
        wait = req.offset_s - clock()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.ensure_future(_one(plan, session, clock, req, req.offset_s)))
        if progress is not None:
            progress(len(tasks), len(plan.requests))
    if tasks:
        timeout = plan.drain_s or None
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for t, req in zip(tasks, plan.requests, strict=False):
        if t.cancelled():
            rec = RequestRecord(
                index=req.index, planned_s=req.offset_s, error="timeout", detail="drain timeout"
            )
            records.append(rec)
        else:
            records.append(t.result())


async def _run_concurrency(plan: ProcessPlan, session, clock: Clock, records: list, progress) -> None:
    queue = iter(plan.requests)
    total = len(plan.requests)

    async def slot() -> None:
        planned = clock()  # a slot "plans" its next send the moment the previous one finishes
        while True:
            if plan.duration_s and clock() >= plan.duration_s:
                return
            try:
                req = next(queue)
            except StopIteration:
                return
            rec = await _one(plan, session, clock, req, planned)
            records.append(rec)
            if progress is not None:
                progress(len(records), total)
            planned = clock()

    await asyncio.gather(*(slot() for _ in range(max(1, plan.concurrency))))


def run_async(coro):
    """Run a coroutine to completion on a fresh uvloop (plain asyncio when uvloop is missing).

    Callers are synchronous (the CLI, a Celery task, a test). When the calling thread already runs
    an event loop (Playwright's sync API, an async view), the coroutine runs on a loop of its own in
    a helper thread instead, and its result or exception comes back here.
    """
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # plain asyncio works, with more schedule delay at high concurrency
        factory = None

    def run():
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = run()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="harness-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def main() -> None:
    """Subprocess entry: plan on stdin, ``ready`` on stdout, epoch on stdin, records to the file in argv[1]."""
    out_path = sys.argv[1]
    plan = ProcessPlan.from_json(sys.stdin.buffer.readline())
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    epoch_wall = float(sys.stdin.readline())
    records = run_async(run_process_plan(plan, epoch_wall=epoch_wall))
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps([r.to_row() for r in records]))
    os.replace(tmp, out_path)  # the parent never reads a half-written file


if __name__ == "__main__":
    main()
