"""Live simulated vLLM: an OpenAI-compatible HTTP server whose token timing comes from the scheduler.

Endpoints (also under any route prefix, e.g. Ray Serve's ``/d/<slug>``): ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/embeddings`` (deterministic unit vectors of ``EMBEDDING_DIM``
floats seeded by each input, as vLLM's pooling runner answers), ``POST /v1/responses`` (OpenAI's
Responses API over the same generator, streaming or not), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text with
vLLM's metric names and a ``model_name`` label), ``POST /tokenize`` (the prompt's token count and
``max_model_len``, as vLLM's, so the load harness can build prompts of exact length).

Two timing modes:

* **Simulated** (default): one ``engines.scheduler.Scheduler`` runs steps in wall-clock time; each step
  sleeps its predicted duration divided by ``time_scale`` (``--time-scale 10`` runs 10x faster than
  the modelled GPU). Batching, chunked prefill, KV blocks, preemption and prefix caching behave as in
  the virtual-time simulator.
* **Fixed** (``--fixed-ttft-ms X --fixed-tpot-ms Y``): for test harnesses. Up to ``max_num_seqs``
  requests run at once (the rest wait FCFS); a running request's first token comes exactly ``X`` ms
  after it starts and each further token ``Y`` ms after the previous one, independent of the others.
  Capacity is therefore ``max_num_seqs / (X + Y * (output_tokens - 1))`` requests per second.

Token accounting (documented approximation, no real tokenizer): a text is ``ceil(len(text) / 4)``
tokens (at least 1), the usual ~4 characters per token of English BPE vocabularies. Chat prompts
count each message's text plus 4 tokens of role/template overhead, plus 2 for the assistant
priming. ``prompt`` given as a list of token ids counts one token per id.

Output: ``max_tokens`` (or ``max_completion_tokens``) tokens, fewer when a ``stop`` string appears
in the synthetic text (``finish_reason: "stop"``). Without a limit and without ``ignore_eos`` the
simulated model "emits EOS" after a length drawn deterministically from the request (16..512
tokens, capped by the context). The text is a deterministic sequence of English words seeded by
``seed`` and the prompt, one word per token.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import hashlib
import heapq
import itertools
import json
import math
import random
import struct
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from asgistream import BodyPusher
from engines import faults
from engines.perf import Efficiency
from engines.presets import gpu_from_dict, gpu_preset, model_from_dict, model_preset
from engines.quality import QualityProfile, answer_tokens
from engines.quality import answer as quality_answer
from engines.scheduler import RUNNING, WAITING, EngineConfig, Request, Scheduler
from engines.specs import GpuSpec, ModelSpec

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PRIMING = 2

WORDS = (  # noqa: SIM905 (a sentence reads better than a 256-item literal)
    "the of and to in is that it for was on are as with his they at be this from have or by one had not "
    "but what all were when we there can an your which their said if do will each about how up out them "
    "then she many some so these would other into has more her two like him see time could no make than "
    "first been its who now people my made over did down only way find use may water long little very "
    "after words called just where most know get through back much go good new write our me man too any "
    "day same right look think also around another came come work three word must because does part even "
    "place well such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own under read "
    "last never us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house world going want school important until form food keep "
    "children feet land side without boy once animals life enough took sometimes four head above kind began "
    "almost live page got earth need far hand high year mother light parts country father let night"
).split(" ")
_NWORDS = len(WORDS)
_MASK64 = (1 << 64) - 1

# vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)  # fmt: skip
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


# ---------------------------------------------------------------------- tokens and text


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``, at least 1: the documented stand-in for a tokenizer."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def synthetic_tokens(seed: int, n: int) -> list[str]:
    """``n`` deterministic word tokens (" word") from a 64-bit LCG seeded by ``seed``."""
    x = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E5) & _MASK64
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & _MASK64
        out.append(" " + WORDS[(x >> 33) % _NWORDS])
    return out


def _prefix_hashes(text: str, block_size: int, n_blocks: int) -> list[int]:
    """Chained hashes of the prompt's full KV blocks (block_size * 4 characters each)."""
    step = block_size * CHARS_PER_TOKEN
    hashes = []
    h = 0x12345
    for i in range(n_blocks):
        h = hash((h, text[i * step : (i + 1) * step]))
        hashes.append(h)
    return hashes


# ---------------------------------------------------------------------- metrics


class Histogram:
    """A Prometheus histogram that can observe one value many times at once."""

    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += n
        self.sum += value * n
        self.count += n

    def render(self, name: str, labels: str, out: list[str]) -> None:
        cum = 0
        for le, c in zip(self.buckets, self.counts, strict=False):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")


class Metrics:
    """vLLM-named counters, gauges and histograms for one engine."""

    def __init__(self, model_name: str) -> None:
        self.labels = f'model_name="{model_name}"'
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}

    def render(self, engine: LiveEngine | FixedEngine) -> bytes:
        lab = self.labels
        out: list[str] = []

        def one(name: str, kind: str, doc: str, value: float) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            out.append(f"{name}{{{lab}}} {value}")

        one(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            engine.num_running,
        )
        one(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            engine.num_waiting,
        )
        one(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage
        )
        one(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in tokens.",
            engine.prefix_queries,
        )
        one("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in tokens.", engine.prefix_hits)
        one("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.", engine.preemptions)
        one(
            "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", engine.prompt_tokens
        )
        one(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            engine.generation_tokens,
        )
        out.append("# HELP vllm:request_success_total Count of successfully processed requests.")
        out.append("# TYPE vllm:request_success_total counter")
        for reason, count in self.success.items():
            out.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {count}')
        for name, hist, doc in (
            ("vllm:time_to_first_token_seconds", self.ttft, "Histogram of time to first token in seconds."),
            ("vllm:inter_token_latency_seconds", self.itl, "Histogram of inter-token latency in seconds."),
            ("vllm:e2e_request_latency_seconds", self.e2e, "Histogram of e2e request latency in seconds."),
            ("vllm:request_queue_time_seconds", self.queue, "Histogram of time spent in WAITING phase."),
        ):
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} histogram")
            hist.render(name, lab, out)
        out.append("")
        return "\n".join(out).encode()


# ---------------------------------------------------------------------- engines


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


# ---------------------------------------------------------------------- request parsing


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        )


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _opt_int(body: dict, name: str, *, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"'{name}' must be an integer")
    if minimum is not None and value < minimum:
        raise _bad(name, f"'{name}' must be >= {minimum}, got {value}")
    return value


def _opt_number(body: dict, name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(name, f"'{name}' must be a number")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' must be between {lo} and {hi}, got {value}")
    return float(value)


def _opt_bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, f"'{name}' must be a boolean")
    return value


@dataclass(slots=True)
class Parsed:
    """A validated completion request."""

    chat: bool
    prompt_text: str
    prompt_tokens: int
    max_tokens: int | None
    stop: list[str]
    seed: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool


def parse_request(body: object, *, chat: bool, model_name: str) -> Parsed:
    """Validate an OpenAI request body; raises ``ApiError`` with the offending ``param``."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' is required and must be a string")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("messages", "'messages' must be a non-empty array")
        parts: list[str] = []
        tokens = CHAT_TOKENS_PRIMING
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise _bad(f"messages[{i}]", "each message needs a string 'role'")
            content = msg.get("content")
            if content is None:
                text = ""
            elif isinstance(content, str):
                text = content
            elif isinstance(content, list):
                texts = []
                for part in content:
                    if (
                        not isinstance(part, dict)
                        or part.get("type") != "text"
                        or not isinstance(part.get("text"), str)
                    ):
                        raise _bad(f"messages[{i}].content", "only text content parts are supported")
                    texts.append(part["text"])
                text = "".join(texts)
            else:
                raise _bad(f"messages[{i}].content", "'content' must be a string or an array of parts")
            parts.append(f"{msg['role']}: {text}\n")
            tokens += CHAT_TOKENS_PER_MESSAGE + (estimate_tokens(text) if text else 0)
        prompt_text = "".join(parts)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if not prompt:
                raise _bad("prompt", "'prompt' must not be empty")
            prompt_text = prompt
            tokens = estimate_tokens(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_text = " ".join(map(str, prompt))
            tokens = len(prompt)
        else:
            raise _bad("prompt", "'prompt' must be a string, a one-element array of strings or token ids")
    max_tokens = _opt_int(body, "max_tokens", minimum=1)
    mct = _opt_int(body, "max_completion_tokens", minimum=1)
    if chat and mct is not None:
        max_tokens = mct
    n = _opt_int(body, "n", minimum=1)
    if n is not None and n != 1:
        raise _bad("n", "only n=1 is supported")
    _opt_number(body, "temperature", 0.0, 2.0)
    _opt_number(body, "top_p", 0.0, 1.0)
    _opt_number(body, "presence_penalty", -2.0, 2.0)
    _opt_number(body, "frequency_penalty", -2.0, 2.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("seed", "'seed' must be an integer")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop] if stop else []
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = [s for s in stop if s]
    else:
        raise _bad("stop", "'stop' must be a string or an array of up to 4 strings")
    stream = _opt_bool(body, "stream")
    include_usage = False
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise _bad("stream_options", "'stream_options' must be an object")
        if not stream:
            raise _bad("stream_options", "'stream_options' is only allowed when 'stream' is true")
        iu = so.get("include_usage", False)
        if not isinstance(iu, bool):
            raise _bad("stream_options.include_usage", "'include_usage' must be a boolean")
        include_usage = iu
    ignore_eos = _opt_bool(body, "ignore_eos")
    return Parsed(
        chat=chat,
        prompt_text=prompt_text,
        prompt_tokens=tokens,
        max_tokens=max_tokens,
        stop=stops,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=ignore_eos,
    )


def plan_output(parsed: Parsed, *, max_model_len: int) -> tuple[list[str], str]:
    """The output tokens (text pieces) and finish reason, decided up front (the text is synthetic)."""
    room = max_model_len - parsed.prompt_tokens
    seed_base = zlib.crc32(parsed.prompt_text.encode()) ^ ((parsed.seed or 0) * 0x1000193)
    if parsed.max_tokens is not None:
        n = parsed.max_tokens
        reason = "length"
    elif parsed.ignore_eos:
        n = room
        reason = "length"
    else:
        # The simulated model's own stopping point: 16..512 tokens, a function of the request.
        n = min(room, 16 + (seed_base * 2654435761 & 0xFFFFFFFF) % 497)
        reason = "stop" if n < room else "length"
    tokens = synthetic_tokens(seed_base, n)
    if parsed.stop:
        text = "".join(tokens)
        cut = min((i for i in (text.find(s) for s in parsed.stop) if i >= 0), default=-1)
        if cut >= 0:
            # Keep whole tokens before the stop string and the part of the stopping token before it.
            pos = 0
            kept: list[str] = []
            for tok in tokens:
                if pos + len(tok) > cut:
                    head = tok[: cut - pos]
                    kept.append(head)
                    break
                kept.append(tok)
                pos += len(tok)
            tokens = kept
            reason = "stop"
    return tokens, reason


# ---------------------------------------------------------------------- embeddings and responses

EMBEDDING_DIM = 256


def parse_embedding_request(body: object, *, model_name: str) -> tuple[list, list[int], str, int]:
    """Validate ``POST /v1/embeddings`` as OpenAI and vLLM do: ``input`` is a non-empty string, a
    non-empty array of non-empty strings, an array of token ids or an array of such arrays. Returns the
    inputs, their token counts, the encoding format and the dimensions."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' is required and must be a string")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    inp = body.get("input")
    if isinstance(inp, str):
        inputs: list = [inp]
    elif isinstance(inp, list) and inp and all(_is_token_id(t) for t in inp):
        inputs = [inp]
    elif isinstance(inp, list):
        inputs = inp
    else:
        raise _bad("input", "'input' must be a string, an array of strings, or an array of token ids")
    if not inputs:
        raise _bad("input", "'input' must not be an empty array")
    tokens = []
    for i, item in enumerate(inputs):
        if isinstance(item, str) and item:
            tokens.append(estimate_tokens(item))
        elif isinstance(item, list) and item and all(_is_token_id(t) for t in item):
            tokens.append(len(item))
        else:
            raise _bad("input", f"input[{i}] must be a non-empty string or a non-empty array of token ids")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise _bad("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    dims = _opt_int(body, "dimensions", minimum=1)
    if dims is not None and dims > EMBEDDING_DIM:
        raise _bad("dimensions", f"'dimensions' must be at most {EMBEDDING_DIM} for this model")
    return inputs, tokens, fmt, dims or EMBEDDING_DIM


def _is_token_id(t: object) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


def embedding_vector(item: str | list[int], dims: int) -> list[float]:
    """A unit vector of ``dims`` floats that depends only on the input (same text, same vector)."""
    key = item.encode() if isinstance(item, str) else orjson.dumps(item)
    rng = random.Random(hashlib.sha256(key).digest())
    vec = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def responses_to_chat(body: object) -> dict:
    """A Responses API request as the equivalent chat request (text input only)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    inp = body.get("input")
    messages: list[dict] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    if isinstance(inp, str) and inp:
        messages.append({"role": "user", "content": inp})
    elif isinstance(inp, list) and inp:
        for i, item in enumerate(inp):
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                raise _bad(f"input[{i}]", "each input item needs a string 'role'")
            content = item.get("content")
            if isinstance(content, list):
                texts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") not in (
                        "input_text",
                        "output_text",
                        "text",
                    ):
                        raise _bad(f"input[{i}].content", "only text content parts are supported")
                    texts.append(part.get("text") or "")
                content = "".join(texts)
            if not isinstance(content, str):
                raise _bad(f"input[{i}].content", "'content' must be a string or an array of text parts")
            messages.append({"role": item["role"], "content": content})
    else:
        raise _bad("input", "'input' must be a non-empty string or array of input items")
    chat = {"model": body.get("model"), "messages": messages, "stream": body.get("stream", False)}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    return chat


# ---------------------------------------------------------------------- the ASGI app

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class OpenAIApp:
    """Raw ASGI application (no framework: every microsecond counts at 1000+ streams)."""

    def __init__(self, *, model_name: str, engine: LiveEngine | FixedEngine, metrics: Metrics,
                 quality: QualityProfile | None = None, seed: int = 0) -> None:  # fmt: skip
        self.model_name = model_name
        self.engine = engine
        self.metrics = metrics
        self.created = int(time.time())
        self.quality = quality  # simulated answer quality for eval requests (engines.quality)
        self.seed = seed

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        path = path.rstrip("/") or "/"
        method = scope["method"]
        try:
            if path.endswith("/v1/chat/completions") or path == "/v1/chat/completions":
                self._need(method, "POST")
                await self._completion(receive, send, chat=True)
            elif path.endswith("/v1/completions"):
                self._need(method, "POST")
                await self._completion(receive, send, chat=False)
            elif path.endswith("/v1/embeddings"):
                self._need(method, "POST")
                await self._embeddings(receive, send)
            elif path.endswith("/v1/responses"):
                self._need(method, "POST")
                await self._responses(receive, send)
            elif path.endswith("/tokenize"):
                self._need(method, "POST")
                await self._tokenize(receive, send)
            elif path.endswith("/v1/models"):
                self._need(method, "GET")
                await self._json(send, 200, self._models())
            elif path.endswith("/health"):
                self.engine.ensure_started()
                await self._raw(send, 200, b"", [(b"content-type", b"text/plain")])
            elif path.endswith("/metrics"):
                body = self.metrics.render(self.engine)
                await self._raw(
                    send, 200, body, [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
                )
            else:
                raise ApiError(404, f"no route for {path}", code="not_found")
        except ApiError as err:
            await self._raw(send, err.status, err.body(), _JSON_HEADERS)

    @staticmethod
    def _need(method: str, expected: str) -> None:
        if method != expected:
            raise ApiError(405, f"method {method} not allowed", code="method_not_allowed")

    async def _lifespan(self, receive, send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.engine.ensure_started()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "governor-simulated-vllm",
                    "root": self.model_name,
                    "max_model_len": self.engine.max_model_len,
                }
            ],
        }

    @staticmethod
    async def _raw(send, status: int, body: bytes, headers: list) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _json(self, send, status: int, obj: dict) -> None:
        await self._raw(send, status, orjson.dumps(obj), _JSON_HEADERS)

    async def _tokenize(self, receive, send) -> None:
        """vLLM's ``POST /tokenize`` (prompt or messages): the count this engine bills, and the context."""
        raw = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc
        chat = isinstance(body, dict) and "messages" in body
        parsed = parse_request(body, chat=chat, model_name=self.model_name)
        limit = self.engine.max_model_len
        await self._json(send, 200, {"count": parsed.prompt_tokens, "max_model_len": limit})

    async def _completion(self, receive, send, *, chat: bool) -> None:
        chunks = []
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        try:
            body = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc
        parsed = parse_request(body, chat=chat, model_name=self.model_name)
        engine = self.engine
        limit = engine.max_model_len
        if parsed.prompt_tokens >= limit or (
            parsed.max_tokens is not None and parsed.prompt_tokens + parsed.max_tokens > limit
        ):
            asked = parsed.prompt_tokens + (parsed.max_tokens or 0)
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens "
                f"({parsed.prompt_tokens} in the messages, {parsed.max_tokens or 0} in the completion). "
                "Please reduce the length of the messages or completion.",
                param="messages" if chat else "prompt",
                code="context_length_exceeded",
            )
        tokens, reason = plan_output(parsed, max_model_len=limit)
        if self.quality is not None and body.get("governor_eval") is not None:
            tokens, reason = self._eval_answer(body["governor_eval"], parsed, limit)
        n_out = len(tokens)
        if n_out == 0:
            tokens, n_out = [""], 1  # a stop string at the very start still costs one step
        why = engine.check_fits(parsed.prompt_tokens, n_out)
        if why:
            raise ApiError(400, why, code="context_length_exceeded")
        bs = engine.block_size
        n_hash = min(parsed.prompt_tokens // bs, len(parsed.prompt_text) // (bs * CHARS_PER_TOKEN))
        hashes = _prefix_hashes(parsed.prompt_text, bs, n_hash)
        try:
            sink = engine.submit(prompt_tokens=parsed.prompt_tokens, max_tokens=n_out, hashes=hashes)
        except ValueError as exc:
            raise ApiError(400, str(exc), code="invalid_value") from exc
        if body.get("governor_timings") is True:
            sink.token_times = []  # no token is out yet: they come from the engine's next ticks
        disconnected = False

        async def watch() -> None:
            nonlocal disconnected
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    disconnected = True
                    sink.wake()
                    return

        watcher = asyncio.get_running_loop().create_task(watch())
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            if parsed.stream:
                await self._stream(send, sink, parsed, tokens, reason, rid, created, lambda: disconnected)
            else:
                while not sink.done and not disconnected:
                    await sink.wait()
                if disconnected or sink.finish_reason == "abort":
                    return
                text = "".join(tokens[: sink.available]).lstrip(" ")
                usage = {
                    "prompt_tokens": parsed.prompt_tokens,
                    "completion_tokens": sink.available,
                    "total_tokens": parsed.prompt_tokens + sink.available,
                }
                if chat:
                    choice = {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": reason,
                    }
                    obj = "chat.completion"
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
                    obj = "text_completion"
                self.metrics.success[reason] = self.metrics.success.get(reason, 0) + 1
                out = {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [choice],
                       "usage": usage}  # fmt: skip
                if sink.token_times is not None and sink.started >= 0:
                    # The engine's own clock, so tests bound the timing the engine kept rather than
                    # what a client starved of CPU happened to see.
                    out["governor_timings"] = {
                        "queued_s": sink.started - sink.arrival,
                        "token_s": [t - sink.started for t in sink.token_times],
                    }
                await self._json(send, 200, out)
        finally:
            watcher.cancel()
            if not sink.done or disconnected:
                engine.abort(sink)

    async def _read_json(self, receive) -> object:
        chunks = []
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        try:
            return orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc

    async def _embeddings(self, receive, send) -> None:
        """``POST /v1/embeddings``: each input's prefill goes through the engine (so it takes the time a
        prefill takes), then a deterministic unit vector per input."""
        body = await self._read_json(receive)
        inputs, tokens, fmt, dims = parse_embedding_request(body, model_name=self.model_name)
        limit = self.engine.max_model_len
        for i, n in enumerate(tokens):
            if n > limit:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, you requested {n} tokens "
                    f"in input[{i}] for embedding generation. Please reduce the length of the input.",
                    param="input",
                    code="context_length_exceeded",
                )
        sinks = [self.engine.submit(prompt_tokens=n, max_tokens=1, hashes=[]) for n in tokens]
        try:
            for sink in sinks:
                while not sink.done:
                    await sink.wait()
        finally:
            for sink in sinks:
                if not sink.done:
                    self.engine.abort(sink)
        data = []
        for i, item in enumerate(inputs):
            vec = embedding_vector(item, dims)
            if fmt == "base64":
                emb: object = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            else:
                emb = vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        total = sum(tokens)
        await self._json(
            send,
            200,
            {"object": "list", "id": "embd-" + uuid.uuid4().hex, "created": int(time.time()),
             "model": self.model_name, "data": data, "usage": {"prompt_tokens": total, "total_tokens": total}},
        )  # fmt: skip

    async def _responses(self, receive, send) -> None:
        """``POST /v1/responses`` (text in, text out): the chat generator behind the Responses API's shape."""
        body = await self._read_json(receive)
        chat_body = responses_to_chat(body)
        parsed = parse_request(chat_body, chat=True, model_name=self.model_name)
        engine = self.engine
        limit = engine.max_model_len
        asked = parsed.prompt_tokens + (parsed.max_tokens or 0)
        if parsed.prompt_tokens >= limit or asked > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens.",
                param="input",
                code="context_length_exceeded",
            )
        tokens, reason = plan_output(parsed, max_model_len=limit)
        tokens = tokens or [""]
        sink = engine.submit(prompt_tokens=parsed.prompt_tokens, max_tokens=len(tokens), hashes=[])
        rid, mid = "resp_" + uuid.uuid4().hex, "msg_" + uuid.uuid4().hex
        created = int(time.time())

        def response(status: str, text: str, n_out: int | None) -> dict:
            usage = None
            if n_out is not None:
                usage = {
                    "input_tokens": parsed.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": n_out, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": parsed.prompt_tokens + n_out,
                }  # fmt: skip
            output = []
            if status == "completed":
                output = [{"type": "message", "id": mid, "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}]  # fmt: skip
            return {
                "id": rid, "object": "response", "created_at": created, "status": status, "model": self.model_name,
                "output": output, "usage": usage, "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "max_output_tokens": parsed.max_tokens,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": 1.0, "top_p": 1.0,
                "metadata": {}, "text": {"format": {"type": "text"}}, "truncation": "disabled",
            }  # fmt: skip

        try:
            if not parsed.stream:
                while not sink.done:
                    await sink.wait()
                text = "".join(tokens[: sink.available]).lstrip(" ")
                await self._json(send, 200, response("completed", text, sink.available))
                return
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            seq = itertools.count()

            async def event(kind: str, payload: dict) -> None:
                data = orjson.dumps({"type": kind, "sequence_number": next(seq), **payload})
                await send({"type": "http.response.body", "body": b"event: " + kind.encode() + b"\ndata: " + data
                            + b"\n\n", "more_body": True})  # fmt: skip

            await event("response.created", {"response": response("in_progress", "", None)})
            item = {"type": "message", "id": mid, "status": "in_progress", "role": "assistant", "content": []}
            await event("response.output_item.added", {"output_index": 0, "item": item})
            sent = 0
            while sent < len(tokens):
                while sink.available <= sent and not sink.done:
                    await sink.wait()
                upto = min(sink.available, len(tokens))
                for tok in tokens[sent:upto]:
                    delta = tok.lstrip(" ") if sent == 0 else tok
                    await event("response.output_text.delta", {"item_id": mid, "output_index": 0,
                                                               "content_index": 0, "delta": delta, "logprobs": []})  # fmt: skip
                    sent += 1
                if sink.done and sink.available <= sent:
                    break
            text = "".join(tokens[:sent]).lstrip(" ")
            await event("response.output_text.done", {"item_id": mid, "output_index": 0, "content_index": 0,
                                                      "text": text, "logprobs": []})  # fmt: skip
            await event("response.completed", {"response": response("completed", text, sent)})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not sink.done:
                engine.abort(sink)

    def _eval_answer(self, truth: object, parsed: Parsed, limit: int) -> tuple[list[str], str]:
        """An eval case's answer, right or wrong as the quality profile decides (simulated)."""
        try:
            text, _ = quality_answer(self.quality, truth, seed=self.seed ^ (parsed.seed or 0),  # type: ignore[arg-type]
                                     prompt_text=parsed.prompt_text)  # fmt: skip
        except ValueError as exc:
            raise _bad("governor_eval", str(exc)) from exc
        return answer_tokens(text, max_tokens=parsed.max_tokens, room=limit - parsed.prompt_tokens)

    async def _stream(self, send, sink: Sink, parsed: Parsed, tokens: list[str], reason: str, rid: str,
                      created: int, is_gone) -> None:  # fmt: skip
        chat = parsed.chat
        model = orjson.dumps(self.model_name).decode()
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":{model},"choices":[{{"index":0,'
        if chat:
            first_pre = head + '"delta":{"role":"assistant","content":'
            pre = head + '"delta":{"content":'
            post = '},"logprobs":null,"finish_reason":null}]}\n\n'
            last_post = '},"logprobs":null,"finish_reason":"' + reason + '"}]}\n\n'
        else:
            first_pre = pre = head + '"text":'
            post = ',"logprobs":null,"finish_reason":null}]}\n\n'
            last_post = ',"logprobs":null,"finish_reason":"' + reason + '"}]}\n\n'
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        loop = asyncio.get_running_loop()
        out = _SseOut(
            sink=sink,
            pusher=BodyPusher(send, loop),
            tokens=tokens,
            first_pre=first_pre.encode(),
            pre=pre.encode(),
            post=post.encode(),
            last_post=last_post.encode(),
            usage_head=(head[: head.index('"choices"')] + '"choices":[],"usage":').encode()
            if parsed.include_usage
            else None,
            prompt_tokens=parsed.prompt_tokens,
            is_gone=is_gone,
            metrics=self.metrics,
            reason=reason,
        )
        sink.listener = out.on_wake
        try:
            out.on_wake()  # tokens that are already out (and a client that is already gone)
            await out.pusher.done
        finally:
            sink.listener = None


# JSON of each token text, built once: the synthetic vocabulary is small, so this stays small too.
_TOKEN_JSON: dict[str, bytes] = {}


def _token_json(tok: str) -> bytes:
    j = _TOKEN_JSON.get(tok)
    if j is None:
        j = orjson.dumps(tok)
        if len(_TOKEN_JSON) < 65536:
            _TOKEN_JSON[tok] = j
    return j


class _SseOut:
    """One stream's SSE chunks, written when the engine hands out tokens (``Sink.listener``)."""

    __slots__ = (
        "sink", "pusher", "tokens", "n_out", "sent", "first_pre", "pre", "post", "last_post", "usage_head",
        "prompt_tokens", "is_gone", "metrics", "reason", "ended",
    )  # fmt: skip

    def __init__(self, *, sink: Sink, pusher: BodyPusher, tokens: list[str], first_pre: bytes, pre: bytes,
                 post: bytes, last_post: bytes, usage_head: bytes | None, prompt_tokens: int, is_gone,
                 metrics: Metrics, reason: str) -> None:  # fmt: skip
        self.sink = sink
        self.pusher = pusher
        self.tokens = tokens
        self.n_out = len(tokens)
        self.sent = 0
        self.first_pre = first_pre
        self.pre = pre
        self.post = post
        self.last_post = last_post
        self.usage_head = usage_head
        self.prompt_tokens = prompt_tokens
        self.is_gone = is_gone
        self.metrics = metrics
        self.reason = reason
        self.ended = False

    def on_wake(self) -> None:
        # Runs inside the engine's timer: an exception here must end this stream, not the engine.
        try:
            self._emit()
        except Exception as exc:  # noqa: BLE001
            self.pusher.close(exc)

    def _emit(self) -> None:
        pusher = self.pusher
        if self.ended or pusher.done.done():
            return
        sink = self.sink
        avail = sink.available
        sent = self.sent
        parts = []
        if avail > sent:
            tokens, n_out, pre, post = self.tokens, self.n_out, self.pre, self.post
            for i in range(sent, avail):
                if i:
                    parts.append(pre)
                    parts.append(_token_json(tokens[i]))
                else:
                    parts.append(self.first_pre)
                    parts.append(orjson.dumps(tokens[0].lstrip(" ")))
                parts.append(self.last_post if i == n_out - 1 else post)
            self.sent = sent = avail
        # The engine may hand out the last token and mark the request done in two separate wakes.
        if sink.done and sink.finish_reason != "abort" and sent >= self.n_out:
            if self.usage_head is not None:
                p = self.prompt_tokens
                parts.append(self.usage_head)
                parts.append(
                    orjson.dumps({"prompt_tokens": p, "completion_tokens": sent, "total_tokens": p + sent})
                )
                parts.append(b"}\n\n")
            parts.append(b"data: [DONE]\n\n")
            success = self.metrics.success
            success[self.reason] = success.get(self.reason, 0) + 1
            self.ended = True
            pusher.push({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
            return
        if parts:
            pusher.push_body(b"".join(parts))
        if self.is_gone() or sink.finish_reason == "abort":
            pusher.close()


# ---------------------------------------------------------------------- construction


def build_engine_app(args: dict) -> OpenAIApp:
    """Build the ASGI app from the Serve-style args dict (see ``engines.serve_app``).

    Keys: ``model_name``; ``model`` (ModelSpec fields, or a preset name string); ``gpu`` (GpuSpec fields or
    a preset name); ``tensor_parallel``; ``engine`` (EngineConfig fields); ``efficiency`` (Efficiency
    fields, optional); ``time_scale`` (default 1); ``seed`` (unused by the engine, kept for the
    record); ``fixed_ttft_ms`` and ``fixed_tpot_ms`` (fixed timing mode when both are set);
    ``quality`` (a simulated quality profile, see ``engines.quality``: requests that carry
    ``governor_eval`` are answered right or wrong as it decides; ``seed`` seeds that draw);
    ``faults`` (optional, ``engines.faults``: injected latency and errors for rollout rehearsals).
    """
    args = faults.engine_args(args)
    model_arg = args.get("model", "llama-3.1-8b")
    model = model_preset(model_arg) if isinstance(model_arg, str) else model_from_dict(dict(model_arg))
    gpu_arg = args.get("gpu", "H100")
    gpu = gpu_preset(gpu_arg) if isinstance(gpu_arg, str) else gpu_from_dict(dict(gpu_arg))
    tp = int(args.get("tensor_parallel", 1))
    engine_cfg = EngineConfig.from_dict(dict(args.get("engine") or {}))
    eff = Efficiency.from_dict(dict(args["efficiency"])) if args.get("efficiency") else None
    model_name = str(args.get("model_name") or model.name)
    metrics = Metrics(model_name)
    sched = Scheduler(model=model, gpu=gpu, tensor_parallel=tp, config=engine_cfg, efficiency=eff)
    fixed_ttft = args.get("fixed_ttft_ms")
    fixed_tpot = args.get("fixed_tpot_ms")
    if fixed_ttft is not None or fixed_tpot is not None:
        engine: LiveEngine | FixedEngine = FixedEngine(
            ttft_s=float(fixed_ttft or 0) / 1000,
            tpot_s=float(fixed_tpot or 0) / 1000,
            max_num_seqs=engine_cfg.max_num_seqs,
            max_model_len=sched.max_model_len,
            block_size=sched.block_size,
            num_blocks=sched.num_blocks,
            metrics=metrics,
        )
    else:
        engine = LiveEngine(sched, time_scale=float(args.get("time_scale", 1.0)), metrics=metrics)
    quality = QualityProfile.from_dict(args["quality"]) if args.get("quality") else None
    app = OpenAIApp(model_name=model_name, engine=engine, metrics=metrics, quality=quality,
                    seed=int(args.get("seed") or 0))  # fmt: skip
    return faults.wrap(app, args)


def _load_json_arg(value: str) -> dict:
    text = value
    if not value.lstrip().startswith("{"):
        with open(value, encoding="utf-8") as fh:
            text = fh.read()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit("--spec-json must be a JSON object")
    return data


def args_from_cli(argv: list[str] | None = None) -> tuple[dict, argparse.Namespace]:
    """Parse the command line into the Serve-style args dict (plus host/port)."""
    p = argparse.ArgumentParser(prog="python -m engines.server", description="Simulated vLLM OpenAI server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--model-name", default=None, help="the model id clients send (default: the spec's name)")
    p.add_argument("--model-preset", default="llama-3.1-8b")
    p.add_argument("--gpu", default="H100", help="GPU preset name")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--spec-json", default=None,
                   help="JSON object (or a file) with any of model, gpu, engine, efficiency as full dicts")  # fmt: skip
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--kv-cache-gib", type=float, default=None)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--time-scale", type=float, default=1.0, help="run N times faster than the modelled GPU")
    p.add_argument("--fixed-ttft-ms", type=float, default=None)
    p.add_argument("--fixed-tpot-ms", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quality-json", default=None,
                   help="simulated quality profile: JSON object (or a file), see engines.quality")  # fmt: skip
    p.add_argument("--log-level", default="warning")
    ns = p.parse_args(argv)
    spec = _load_json_arg(ns.spec_json) if ns.spec_json else {}
    engine = dict(spec.get("engine") or {})
    for flag, key in (
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("block_size", "block_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("max_model_len", "max_model_len"),
        ("kv_cache_gib", "kv_cache_gib"),
    ):
        value = getattr(ns, flag)
        if value is not None:
            engine[key] = value
    if ns.no_prefix_caching:
        engine["enable_prefix_caching"] = False
    if ns.no_chunked_prefill:
        engine["enable_chunked_prefill"] = False
    args = {
        "model_name": ns.model_name or spec.get("model_name"),
        "model": spec.get("model") or ns.model_preset,
        "gpu": spec.get("gpu") or ns.gpu,
        "tensor_parallel": spec.get("tensor_parallel", ns.tp),
        "engine": engine,
        "efficiency": spec.get("efficiency"),
        "time_scale": ns.time_scale,
        "seed": ns.seed,
        "fixed_ttft_ms": ns.fixed_ttft_ms,
        "fixed_tpot_ms": ns.fixed_tpot_ms,
        "quality": _load_json_arg(ns.quality_json) if ns.quality_json else spec.get("quality"),
        "faults": spec.get("faults"),
    }
    return args, ns


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m engines.server``."""
    import uvicorn

    args, ns = args_from_cli(argv)
    app = build_engine_app(args)
    uvicorn.run(
        app,
        host=ns.host,
        port=ns.port,
        log_level=ns.log_level,
        access_log=False,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        timeout_keep_alive=30,
        backlog=4096,
    )


# Keep GpuSpec/ModelSpec importable from here for callers that build specs by hand.
__all__ = ["GpuSpec", "ModelSpec", "OpenAIApp", "build_engine_app", "estimate_tokens", "main"]

if __name__ == "__main__":
    main()
