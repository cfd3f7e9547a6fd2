"""Virtual-time simulation: run a workload through the scheduler and the perf model, no clock.

``simulate(workload, config, seed=..., n=... or duration=...)`` samples the request schedule
(``Workload.sample_requests``), then loops: admit the requests that have arrived by ``now``, plan a
step (``Scheduler.schedule``), advance ``now`` by its predicted duration, apply it. When the engine is
idle, ``now`` jumps to the next arrival. Closed-loop workloads (``fixed_concurrency(n)``) send the next
request at the moment one finishes. The result is deterministic for a seed.

Outside the engine: every request reaches the engine ``Efficiency.request_overhead_s`` after the
client sent it (API server: HTTP, tokenizing, hand-off to the engine core, first SSE chunk), so the
overhead is part of TTFT and E2E but not of queue time or step time; a closed-loop client's next
request reaches the engine that much after the previous one finished. The API server hands requests
to the engine one at a time (``HANDOFF_GAP_S`` apart at least, in send order), so of several requests
sent at the same instant an idle engine starts a step on the first and the others wait for the next
step, as on vLLM; only the order matters, not the gap's size.

Closed-loop clients are staggered (``SimConfig.stagger_closed_loop``, default on): client ``i`` of
``n`` sends its first request at ``i * e2e_est / n``, with ``e2e_est`` the perf model's estimate of one
request alone in a batch of ``n`` (overhead + prefill + decode). Real clients drift apart within a few
requests (network, API server and sampling jitter); simulated ones with fixed lengths would otherwise
stay in lockstep forever, so that every cohort prefilled ``n`` prompts in one step and TTFT grew with
``n`` far faster than on a real server.

Per request (exact, same definitions as ``vllm bench serve``): TTFT = first token - arrival, TPOT =
(E2E - TTFT) / (output - 1), E2E = last token - arrival, queue time = first scheduled - arrival, the
largest ITL gap. Pooled ITL percentiles come from the per-step durations weighted by the number of
sequences that produced a token in that step, plus the gaps that span a preemption.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np

from engines.perf import Efficiency
from engines.scheduler import FINISHED, EngineConfig, Request, Scheduler
from engines.specs import GpuSpec, ModelSpec
from engines.workload import RequestSchedule, Workload

_GROUP_SPACING = 1 << 24
# The API server hands requests to the engine core one at a time: requests sent at the same instant
# reach the engine at least this far apart, in send order, so an idle engine starts a step on the first
# before the next arrives (what vLLM does; fits that were given a spread put it at this floor).
HANDOFF_GAP_S = 1e-6


@dataclass(slots=True)
class SimConfig:
    """What is simulated: model, GPU group, engine arguments and (optionally) fitted efficiencies."""

    model: ModelSpec
    gpu: GpuSpec
    tensor_parallel: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    efficiency: Efficiency | None = None
    sample_interval_s: float = 1.0  # time-series resolution (virtual seconds)
    # Closed loops: spread the clients' first sends over one estimated request lifetime (module doc).
    stagger_closed_loop: bool = True


@dataclass(slots=True)
class SimResult:
    """Per-request arrays (NaN where undefined), engine counters, time series and summaries."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    itl_max_s: np.ndarray
    queue_s: np.ndarray
    engine_ttft_s: np.ndarray  # first token - reaching the engine: vLLM's queue + prefill time
    preemptions: np.ndarray
    prefix_hit_tokens: np.ndarray
    rejected: np.ndarray  # bool: longer than max_model_len
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prompt_tokens: int
    generation_tokens: int
    steps: int
    duration_s: float
    num_blocks: int
    timeseries: dict[str, np.ndarray]
    step_dur_s: np.ndarray
    step_ndec: np.ndarray
    resumed_gaps_s: np.ndarray
    wall_s: float

    @property
    def completed(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.e2e_s)))

    def itl_values(self) -> tuple[np.ndarray, np.ndarray]:
        """Pooled ITL values and their weights (how many tokens saw that gap)."""
        mask = self.step_ndec > 0
        values = np.concatenate([self.step_dur_s[mask], self.resumed_gaps_s])
        weights = np.concatenate([self.step_ndec[mask].astype(float), np.ones(len(self.resumed_gaps_s))])
        return values, weights

    def itl_percentile(self, q: float) -> float:
        """Weighted percentile (``q`` in 0..100) of the pooled ITL, exact over all tokens."""
        values, weights = self.itl_values()
        if not len(values):
            return float("nan")
        order = np.argsort(values, kind="stable")
        cum = np.cumsum(weights[order])
        k = np.searchsorted(cum, q / 100.0 * cum[-1], side="left")
        return float(values[order][min(k, len(values) - 1)])

    def summary(self) -> dict:
        """Run-level figures in the units the console shows (seconds, tokens/s)."""

        def stats(arr: np.ndarray) -> dict:
            a = arr[~np.isnan(arr)]
            if not len(a):
                return {"mean": None, "median": None, "p90": None, "p99": None}
            return {
                "mean": float(a.mean()),
                "median": float(np.median(a)),
                "p90": float(np.percentile(a, 90)),
                "p99": float(np.percentile(a, 99)),
            }

        values, weights = self.itl_values()
        itl_mean = float(np.average(values, weights=weights)) if len(values) else None
        dur = self.duration_s or float("nan")
        done = ~np.isnan(self.e2e_s)
        return {
            "requests": len(self.arrival_s),
            "completed": int(done.sum()),
            "rejected": int(self.rejected.sum()),
            "duration_s": self.duration_s,
            "request_throughput": float(done.sum() / dur),
            "output_throughput": float(self.output_len[done].sum() / dur),
            "total_token_throughput": float((self.output_len[done].sum() + self.input_len[done].sum()) / dur),
            "ttft_s": stats(self.ttft_s),
            "tpot_s": stats(self.tpot_s),
            "e2e_s": stats(self.e2e_s),
            "queue_s": stats(self.queue_s),
            "itl_s": {
                "mean": itl_mean,
                "median": self.itl_percentile(50),
                "p90": self.itl_percentile(90),
                "p99": self.itl_percentile(99),
            },
            "num_preemptions": self.num_preemptions,
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            "prefix_cache_hit_rate": (
                self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
            ),
            "kv_usage_max": float(self.timeseries["kv_usage"].max()) if len(self.timeseries["t"]) else 0.0,
            "steps": self.steps,
            "num_blocks": self.num_blocks,
            "wall_s": self.wall_s,
        }


def simulate(
    workload: Workload,
    config: SimConfig,
    *,
    seed: int = 0,
    n: int | None = None,
    duration: float | None = None,
    schedule: RequestSchedule | None = None,
) -> SimResult:
    """Simulate ``n`` requests (or those arriving within ``duration`` s) of ``workload`` on ``config``.

    Pass ``schedule`` to replay an already sampled schedule (``n``/``duration`` are then ignored).
    """
    t_wall = time.perf_counter()
    if schedule is None:
        if n is None and duration is None:
            raise ValueError("give n or duration")
        schedule = workload.sample_requests(n, duration=duration, seed=seed)
    sched = Scheduler(
        model=config.model,
        gpu=config.gpu,
        tensor_parallel=config.tensor_parallel,
        config=config.engine,
        efficiency=config.efficiency,
    )
    bs = sched.block_size
    count = len(schedule)
    arrivals = schedule.arrival_s.tolist()
    inp = schedule.input_len.tolist()
    out = schedule.output_len.tolist()
    groups = schedule.prefix_group.tolist()
    plens = schedule.prefix_len.tolist()
    max_len = sched.max_model_len
    rejected = np.zeros(count, dtype=bool)

    # Shared-prefix block hashes per group: negative ints, never equal to a request's unique hashes.
    group_hashes: dict[int, list[int]] = {}
    if sched.prefix_caching:
        need: dict[int, int] = {}
        for g, p in zip(groups, plens, strict=True):
            if g >= 0 and p // bs > need.get(g, 0):
                need[g] = p // bs
        for g, k in need.items():
            base = -(g + 1) * _GROUP_SPACING
            group_hashes[g] = [base - i for i in range(k)]

    reqs: list[Request | None] = [None] * count

    def make(i: int, at: float) -> Request | None:
        p = inp[i]
        o = out[i]
        if p + 1 > max_len:
            rejected[i] = True
            return None
        if p + o > max_len:
            o = max_len - p  # vLLM stops at max_model_len
        g = groups[i]
        shared = group_hashes.get(g) if g >= 0 else None
        req = Request(i, p, o, at, shared, plens[i] // bs if shared is not None else 0)
        reqs[i] = req
        return req

    closed = schedule.concurrency
    # Outside the engine: the API server's fixed latency (HTTP, tokenizer, IPC, first SSE chunk).
    overhead = sched.perf.eff.request_overhead_s
    sent_at = np.zeros(count)
    ts_t: list[float] = []
    ts_kv: list[float] = []
    ts_run: list[int] = []
    ts_wait: list[int] = []
    interval = config.sample_interval_s
    next_sample = 0.0
    now = 0.0
    nxt = 0  # next request index to send
    schedule_fn = sched.schedule
    complete_fn = sched.complete
    add = sched.add_request
    # Requests sent but not yet at the engine, as (engine arrival, index, request).
    in_flight: list[tuple[float, int, Request]] = []
    last_handoff = -1.0

    def send(at: float) -> bool:
        """The next request is sent at ``at``; False when it was rejected (longer than the context)."""
        nonlocal nxt, last_handoff
        i = nxt
        nxt += 1
        sent_at[i] = at
        reach = max(at + overhead, last_handoff + HANDOFF_GAP_S)
        last_handoff = reach
        r = make(i, reach)
        if r is None:
            return False
        heapq.heappush(in_flight, (r.arrival, r.rid, r))
        return True

    def send_closed(at: float) -> None:
        """A closed-loop client sends its next request at ``at`` (skipping rejected ones)."""
        while nxt < count and not send(at):
            pass

    def sample_idle(until: float) -> None:
        nonlocal next_sample
        while next_sample < until:
            ts_t.append(next_sample)
            ts_kv.append(sched.kv_usage)
            ts_run.append(0)
            ts_wait.append(0)
            next_sample += interval

    if closed:
        clients = min(closed, count)
        spacing = 0.0
        if config.stagger_closed_loop and clients > 1:
            perf = sched.perf
            inp0 = float(np.mean(inp[:clients]))
            out0 = float(np.mean(out[:clients]))
            e2e_est = (
                overhead
                + perf.prefill_time(max(1, int(inp0)), chunk=sched.max_batched)
                + max(0.0, out0 - 1) * perf.decode_step_time(clients, int(inp0 + out0 / 2))
            )
            spacing = e2e_est / clients
        for i in range(clients):
            send_closed(i * spacing)
    while True:
        if not closed:
            while nxt < count and arrivals[nxt] <= now:
                send(arrivals[nxt])
        while in_flight and in_flight[0][0] <= now:
            add(heapq.heappop(in_flight)[2])
        plan = schedule_fn(now)
        if plan is None:
            if sched.running or sched.waiting:
                raise RuntimeError("scheduler stalled with queued requests")  # pragma: no cover
            nxt_at = in_flight[0][0] if in_flight else None
            if not closed and nxt < count and (nxt_at is None or arrivals[nxt] < nxt_at):
                nxt_at = arrivals[nxt]
            if nxt_at is None:
                break
            # Idle until the next request is sent or reaches the engine: sample the idle state.
            sample_idle(nxt_at)
            now = max(now, nxt_at)
            continue
        end = now + plan.duration
        while end >= next_sample:
            ts_t.append(next_sample)
            ts_kv.append(sched.kv_usage)
            ts_run.append(len(sched.running))
            ts_wait.append(len(sched.waiting))
            next_sample += interval
        finished = complete_fn(end)
        now = end
        if closed and finished:
            for _ in finished:
                send_closed(now)

    # Collect per-request metrics.
    ttft = np.full(count, np.nan)
    tpot = np.full(count, np.nan)
    e2e = np.full(count, np.nan)
    itl_max = np.full(count, np.nan)
    queue = np.full(count, np.nan)
    engine_ttft = np.full(count, np.nan)
    pre = np.zeros(count, dtype=np.int64)
    hits = np.zeros(count, dtype=np.int64)
    arr_out = np.zeros(count)
    out_len = np.zeros(count, dtype=np.int64)
    for i, r in enumerate(reqs):
        if r is None:
            continue
        sent = sent_at[i]  # the client's send time; r.arrival is when the engine saw it
        arr_out[i] = sent
        if r.status != FINISHED:
            continue  # pragma: no cover
        ttft[i] = r.first_token - sent
        e2e[i] = r.finish_time - sent
        if r.num_output > 1:
            tpot[i] = (e2e[i] - ttft[i]) / (r.num_output - 1)
            itl_max[i] = r.itl_max
        queue[i] = r.first_sched - r.arrival
        engine_ttft[i] = r.first_token - r.arrival
        pre[i] = r.n_preempted
        hits[i] = r.hit_tokens
        out_len[i] = r.num_output
    return SimResult(
        arrival_s=arr_out if closed else schedule.arrival_s.copy(),
        input_len=schedule.input_len.copy(),
        output_len=out_len,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        itl_max_s=itl_max,
        queue_s=queue,
        engine_ttft_s=engine_ttft,
        preemptions=pre,
        prefix_hit_tokens=hits,
        rejected=rejected,
        num_preemptions=sched.num_preemptions,
        prefix_cache_queries=sched.prefix_cache_queries,
        prefix_cache_hits=sched.prefix_cache_hits,
        prompt_tokens=sched.prompt_tokens,
        generation_tokens=sched.generation_tokens,
        steps=sched.step,
        duration_s=now,
        num_blocks=sched.num_blocks,
        timeseries={
            "t": np.asarray(ts_t),
            "kv_usage": np.asarray(ts_kv),
            "running": np.asarray(ts_run),
            "waiting": np.asarray(ts_wait),
        },
        step_dur_s=np.asarray(sched.step_dur),
        step_ndec=np.asarray(sched.step_ndec),
        resumed_gaps_s=np.asarray(sched.resumed_gaps),
        wall_s=time.perf_counter() - t_wall,
    )
