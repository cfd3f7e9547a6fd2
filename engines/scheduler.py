"""A vLLM-v1-like scheduler with a paged KV cache, driven step by step by ``sim`` and ``server``.

One call to ``Scheduler.schedule(now)`` plans one engine step the way vLLM v1's scheduler does:

1. Running requests first, in admission order. Decoding requests need one token each; a request
   still in (chunked) prefill takes ``min(remaining, token_budget)`` tokens. Each needs KV blocks for
   the tokens it computes; when the pool has no free block the *last* running request is preempted
   (recompute: its blocks are freed, it goes back to the *front* of the waiting queue and later
   recomputes prompt + generated tokens), counted in ``num_preemptions``.
2. Then, only if nothing was preempted this step, waiting requests in FCFS order while fewer than
   ``max_num_seqs`` run and token budget (``max_num_batched_tokens``) is left. The head of the queue
   blocks the rest (no skipping). With prefix caching, the longest run of full blocks whose hashes
   are cached is reused (at most ``num_tokens - 1`` tokens, like vLLM), counted in
   ``prefix_cache_queries``/``prefix_cache_hits`` (tokens). Without chunked prefill, a prompt that
   does not fit the remaining budget waits for a later step.

``complete(now)`` applies the step: prefills advance, a request whose prompt (+ already generated
tokens, after a preemption) is fully computed samples a token, every decoding request samples one,
and requests that reached their output length finish and free their blocks.

Blocks follow vLLM's ``BlockPool``: a free queue in LRU order (freed blocks go to the tail, a
request's blocks in reverse so its tail is evicted first), a hash -> block map of cached full blocks
that survive in the free queue until reused, reference counts for blocks shared through the cache.
``kv_cache_usage = 1 - free_blocks / total_blocks`` (cached-but-free blocks count as free, as in vLLM).
Only blocks that carry a hash are observable (they can be hit or evicted), so only those get an
identity: the free queue stores runs of interchangeable uncached blocks as counts and cached blocks
as ids, and a request holds its identified prefix (hits + registered blocks) as ids plus a count of
anonymous blocks. The LRU order of cached blocks, and so every hit and eviction, is the same as with
one id per block; allocating and freeing cost O(cached blocks) instead of O(blocks).

Speed: decoding requests are tracked lazily. Between its "anchor" step and its finish step a decoding
request gains exactly one token per step, so its counters are computed from the step number; only
the steps where it crosses a block boundary (every ``block_size`` tokens, kept in ``block_size``
buckets keyed by step phase) and its finish step (a map step -> requests) touch it. Per-request
metrics stay exact: the gap before each of its tokens is that step's duration, so ITL max and the
pooled ITL distribution come from the per-step durations.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from dataclasses import asdict, dataclass

from engines.memory import GIB, estimate_memory
from engines.perf import Efficiency, PerfModel
from engines.specs import GpuSpec, ModelSpec

WAITING = 0
RUNNING = 1
FINISHED = 2
ABORTED = 3

# Unique (per-request) block hashes are ``uid_base + block_index``; shared-prefix hashes are other
# values (negative ints in the simulator, chained string hashes in the server). Requests are spaced
# 2**24 apart, enough for 268M-token sequences.
_UID_SPACING = 1 << 24


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The vLLM engine arguments the model depends on (names as in ``vllm serve``).

    Defaults are vLLM v1's for the OpenAI server on >= 70 GiB GPUs (``max_num_batched_tokens`` 8192,
    chunked prefill and prefix caching on), with ``max_num_seqs`` 256.
    ``kv_cache_gib`` sets the KV pool directly (like ``VLLM_CPU_KVCACHE_SPACE``) and
    ``num_gpu_blocks_override`` the block count (like vLLM's flag of that name); both skip the memory
    estimate. ``max_model_len`` defaults to the model's context.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_model_len: int | None = None
    kv_cache_gib: float | None = None
    num_gpu_blocks_override: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.block_size < 1:
            raise ValueError("max_num_seqs, max_num_batched_tokens and block_size must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM rejects this too: every running sequence must fit one decode token per step.
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown engine config keys: {sorted(unknown)}")
        return cls(**data)


class Request:
    """One sequence inside the scheduler (no per-token objects)."""

    __slots__ = (
        "rid",
        "prompt_len",
        "max_out",
        "shared",
        "n_shared",
        "uid",
        "arrival",
        "status",
        "num_computed",
        "num_output",
        "blocks",
        "n_anon",
        "decoding",
        "s0",
        "c0",
        "o0",
        "bkey",
        "fstep",
        "first_sched",
        "first_token",
        "last_token",
        "finish_time",
        "itl_max",
        "n_preempted",
        "hit_tokens",
        "aborted",
        "finish_reason",
        "sink",
    )

    def __init__(
        self,
        rid: int,
        prompt_len: int,
        max_out: int,
        arrival: float,
        shared: list | None = None,
        n_shared: int = 0,
        sink: object = None,
    ) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_out = max_out
        self.shared = shared
        self.n_shared = n_shared if shared is not None else 0
        self.uid = (rid + 1) * _UID_SPACING
        self.arrival = arrival
        self.status = WAITING
        self.num_computed = 0
        self.num_output = 0
        self.blocks: list[int] = []  # identified blocks: indices 0..len-1 (hits and registered ones)
        self.n_anon = 0  # anonymous blocks after them
        self.decoding = False
        self.s0 = 0
        self.c0 = 0
        self.o0 = 0
        self.bkey = 0
        self.fstep = 0
        self.first_sched = -1.0
        self.first_token = -1.0
        self.last_token = -1.0
        self.finish_time = -1.0
        self.itl_max = 0.0
        self.n_preempted = 0
        self.hit_tokens = 0
        self.aborted = False
        self.finish_reason = ""
        self.sink = sink


_HOLDER = Request(-1, 1, 1, 0.0)  # scratch owner for bulk anonymous allocations


@dataclass(slots=True)
class StepPlan:
    """What one step computes; ``duration`` is the perf model's prediction in seconds."""

    step: int
    start: float
    duration: float
    new_tokens: int
    num_decode: int
    prefill_tokens: int
    chunks: list  # [(request, start_token, num_tokens)]
    preempted: int


class Scheduler:
    """Continuous batching over a paged KV cache; see the module docstring for the policy."""

    def __init__(
        self,
        *,
        model: ModelSpec,
        gpu: GpuSpec,
        tensor_parallel: int = 1,
        config: EngineConfig | None = None,
        efficiency: Efficiency | None = None,
        perf: PerfModel | None = None,
        num_blocks: int | None = None,
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.tp = tensor_parallel
        self.config = config or EngineConfig()
        cfg = self.config
        self.perf = perf or PerfModel(
            model=model, gpu=gpu, tensor_parallel=tensor_parallel, efficiency=efficiency
        )
        self.max_model_len = min(cfg.max_model_len or model.max_context, model.max_context)
        bs = cfg.block_size
        if num_blocks is None:
            if cfg.num_gpu_blocks_override:
                num_blocks = cfg.num_gpu_blocks_override
            elif cfg.kv_cache_gib is not None:
                num_blocks = int(cfg.kv_cache_gib * GIB // (model.kv_bytes_per_token * bs))
            else:
                est = estimate_memory(
                    model=model,
                    gpu=gpu,
                    tensor_parallel=tensor_parallel,
                    gpu_memory_utilization=cfg.gpu_memory_utilization,
                    context_len=self.max_model_len,
                    block_size=bs,
                    max_num_batched_tokens=cfg.max_num_batched_tokens,
                    max_num_seqs=cfg.max_num_seqs,
                )
                num_blocks = est.kv_capacity_tokens // bs
        if num_blocks < 1:
            raise ValueError("the KV cache has no room: weights do not fit the memory")
        if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < self.max_model_len:
            # Same rule as vLLM: without chunking a full prompt must fit one step's budget.
            self.max_model_len = cfg.max_num_batched_tokens
        self.num_blocks = num_blocks
        self.block_size = bs
        self.max_num_seqs = cfg.max_num_seqs
        self.max_batched = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.prefix_caching = cfg.enable_prefix_caching
        # Block pool.
        # Free queue: negative entries are runs of -e uncached blocks, others cached block ids (valid
        # while in ``cached_free``; a cache hit takes a block out and leaves a stale entry behind).
        self.free_q: deque[int] = deque([-num_blocks])
        self.num_free = num_blocks
        self.cached_free: dict[int, None] = {}
        self.ref: dict[int, int] = {}  # identified blocks in use -> reference count
        self.block_hash: dict[int, object] = {}
        self.cache: dict[object, int] = {}
        self._next_id = 0
        # Queues.
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}
        self.prefilling: dict[int, Request] = {}
        self.buckets: list[dict[int, Request]] = [{} for _ in range(bs)]
        self.finish_at: dict[int, list[Request]] = {}
        self.n_dec = 0
        self.dec_k = 0  # sum over decoders of (c0 - s0): their computed tokens at step s are dec_k + n_dec*s
        self.step = 0
        self.step_dur: list[float] = []  # gap before the tokens of step s (its duration)
        self.step_ndec: list[int] = []  # decoders that produced a token in step s
        self.resumed_gaps: list[float] = []  # ITL gaps that span a preemption
        self.last_end = 0.0  # when the last step ended
        self._plan: StepPlan | None = None
        self._aborts: list[Request] = []
        # Counters named after vLLM's metrics.
        self.num_preemptions = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.num_finished = 0
        # Live mode collects the requests that got a token in the last step.
        self.collect_emitted = False
        self.emitted: list[Request] = []

    # ------------------------------------------------------------------ public state

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc`` (a fraction in [0, 1])."""
        return 1.0 - self.num_free / self.num_blocks

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def output_count(self, req: Request) -> int:
        """Tokens generated so far (decoders are tracked lazily; this is exact after ``complete``)."""
        if req.decoding:
            return req.o0 + (self.step - req.s0)
        return req.num_output

    # ------------------------------------------------------------------ requests

    def add_request(self, req: Request) -> None:
        """Queue a request (FCFS). Its prompt plus output must fit ``max_model_len`` and the pool."""
        if req.prompt_len < 1 or req.max_out < 1:
            raise ValueError("prompt and output lengths must be >= 1")
        if req.prompt_len + req.max_out > self.max_model_len:
            raise ValueError(
                f"prompt ({req.prompt_len}) + max tokens ({req.max_out}) exceed max_model_len {self.max_model_len}"
            )
        if math.ceil((req.prompt_len + req.max_out) / self.block_size) > self.num_blocks:
            raise ValueError("the request needs more KV blocks than the whole cache holds")
        self.waiting.append(req)

    def abort(self, req: Request) -> None:
        """Abort a request (client went away); applied before the next step is planned."""
        if req.status in (WAITING, RUNNING) and not req.aborted:
            req.aborted = True
            self._aborts.append(req)

    def _apply_aborts(self) -> None:
        for req in self._aborts:
            if req.status == WAITING:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(req)
            elif req.status == RUNNING:
                self._remove_running(req, self.step)
                self._free_blocks(req, register=False)
            req.status = ABORTED
            req.finish_reason = "abort"
        self._aborts.clear()

    # ------------------------------------------------------------------ block pool

    def _alloc(self, req: Request, n: int) -> None:
        """Take ``n`` blocks from the head of the free queue (evicting cached ones) for ``req``."""
        self.num_free -= n
        req.n_anon += n
        q = self.free_q
        cached_free = self.cached_free
        while n:
            e = q[0]
            if e < 0:
                if -e > n:
                    q[0] = e + n
                    return
                q.popleft()
                n += e
            else:
                q.popleft()
                if e in cached_free:
                    del cached_free[e]
                    h = self.block_hash.pop(e)
                    if self.cache.get(h) == e:
                        del self.cache[h]
                    n -= 1

    def _alloc_anon(self, n: int) -> None:
        """``_alloc`` without an owner: the caller adds the ``n`` blocks to its requests' counts."""
        holder = _HOLDER
        holder.n_anon = 0
        self._alloc(holder, n)

    def _hash(self, req: Request, i: int) -> object:
        return req.shared[i] if i < req.n_shared else req.uid + i  # type: ignore[index]

    def _register(self, req: Request, upto: int) -> None:
        """Make full blocks ``len(req.blocks)..upto-1`` of ``req`` findable by hash."""
        blocks = req.blocks
        m = len(blocks)
        if upto <= m:
            return
        cache = self.cache
        bh = self.block_hash
        ref = self.ref
        b = self._next_id
        self._next_id += upto - m
        req.n_anon -= upto - m
        for i in range(m, upto):
            h = self._hash(req, i)
            ref[b] = 1
            if h not in cache:
                cache[h] = b
                bh[b] = h
            blocks.append(b)
            b += 1

    def _free_blocks(self, req: Request, *, register: bool) -> None:
        if register and self.prefix_caching:
            # Only a preempted request can ever look its own unique blocks up again.
            self._register(req, min(req.num_computed // self.block_size, len(req.blocks) + req.n_anon))
        q = self.free_q
        # The anonymous tail first (vLLM frees a request's blocks last-first), merged into one run.
        n = req.n_anon
        if n:
            if q and q[-1] < 0:
                q[-1] -= n
            else:
                q.append(-n)
            self.num_free += n
        if req.blocks:
            ref = self.ref
            bh = self.block_hash
            cache = self.cache
            for b in reversed(req.blocks):
                r = ref[b] - 1
                if r:
                    ref[b] = r
                    continue
                del ref[b]
                self.num_free += 1
                h = bh.pop(b, None)
                if h is None:
                    if q and q[-1] < 0:
                        q[-1] -= 1
                    else:
                        q.append(-1)
                    continue
                # A fresh id for the queued copy, so a stale queue entry of ``b`` (left by an earlier
                # cache hit) can never stand for it: the LRU position is this one.
                nb = self._next_id
                self._next_id += 1
                bh[nb] = h
                cache[h] = nb
                self.cached_free[nb] = None
                q.append(nb)
        req.blocks = []
        req.n_anon = 0

    # ------------------------------------------------------------------ decoders (lazy)

    def _add_decoder(self, req: Request, s0: int) -> None:
        req.decoding = True
        req.s0 = s0
        req.c0 = req.num_computed
        req.o0 = req.num_output
        req.bkey = (s0 - req.c0) % self.block_size
        self.buckets[req.bkey][req.rid] = req
        req.fstep = s0 + req.max_out - req.o0 - 1
        lst = self.finish_at.get(req.fstep)
        if lst is None:
            self.finish_at[req.fstep] = [req]
        else:
            lst.append(req)
        self.n_dec += 1
        self.dec_k += req.c0 - s0

    def _materialize(self, req: Request, step: int) -> None:
        """Bring a decoder's counters to the start of ``step`` and drop it from the lazy structures."""
        d = step - req.s0
        req.num_computed = req.c0 + d
        req.num_output = req.o0 + d
        if d > 0:
            m = max(self.step_dur[req.s0 : step])
            if m > req.itl_max:
                req.itl_max = m
            req.last_token = self.last_end
        del self.buckets[req.bkey][req.rid]
        lst = self.finish_at.get(req.fstep)
        if lst is not None:
            with contextlib.suppress(ValueError):
                lst.remove(req)
        self.n_dec -= 1
        self.dec_k -= req.c0 - req.s0
        req.decoding = False

    def _remove_running(self, req: Request, step: int) -> None:
        if req.decoding:
            self._materialize(req, step)
        self.prefilling.pop(req.rid, None)
        del self.running[req.rid]

    def _preempt_last(self) -> Request:
        victim = self.running[next(reversed(self.running))]
        self._remove_running(victim, self.step)
        self._free_blocks(victim, register=True)
        victim.num_computed = 0
        victim.status = WAITING
        victim.n_preempted += 1
        self.waiting.appendleft(victim)
        self.num_preemptions += 1
        return victim

    # ------------------------------------------------------------------ the step

    def schedule(self, now: float) -> StepPlan | None:
        """Plan the next step at time ``now``; ``None`` when there is nothing to run."""
        if self._aborts:
            self._apply_aborts()
        if not self.running and not self.waiting:
            return None
        s = self.step
        bs = self.block_size
        preempted = 0
        # 1a. Decoders that cross into a new block this step need one block each.
        bucket = self.buckets[s % bs]
        if bucket and len(bucket) <= self.num_free:
            # Enough free blocks for all of them: no preemption, and anonymous blocks are
            # interchangeable, so take them in one go.
            self._alloc_anon(len(bucket))
            for req in bucket.values():
                req.n_anon += 1
        elif bucket:
            for req in list(bucket.values()):
                if req.status != RUNNING:
                    continue
                while not self.num_free:
                    victim = self._preempt_last()
                    preempted += 1
                    if victim is req:
                        break
                if req.status != RUNNING:
                    break
                self._alloc(req, 1)
        budget = self.max_batched - self.n_dec
        chunks: list = []
        # 1b. Running requests still in prefill (always at the tail of the running order).
        if self.prefilling:
            for req in list(self.prefilling.values()):
                if req.status != RUNNING:
                    continue
                if budget <= 0:
                    break
                total = req.prompt_len + req.num_output
                n = total - req.num_computed
                if n > budget:
                    n = budget
                need = -(-(req.num_computed + n) // bs) - len(req.blocks) - req.n_anon
                while need > self.num_free:
                    victim = self._preempt_last()
                    preempted += 1
                    if victim is req:
                        break
                if req.status != RUNNING:
                    break
                if need > 0:
                    self._alloc(req, need)
                chunks.append((req, req.num_computed, n))
                budget -= n
        # 2. Waiting requests, FCFS, only when nothing was preempted.
        if not preempted:
            waiting = self.waiting
            running = self.running
            while waiting and budget > 0 and len(running) < self.max_num_seqs:
                req = waiting[0]
                total = req.prompt_len + req.num_output
                hits: list[int] = []
                if self.prefix_caching:
                    get = self.cache.get
                    max_hit = (total - 1) // bs
                    i = 0
                    if req.n_shared:
                        for h in req.shared[: min(req.n_shared, max_hit)]:  # type: ignore[index]
                            b = get(h)
                            if b is None:
                                break
                            hits.append(b)
                        i = len(hits)
                    if i == req.n_shared:
                        uid = req.uid
                        while i < max_hit:
                            b = get(uid + i)
                            if b is None:
                                break
                            hits.append(b)
                            i += 1
                hit_tokens = len(hits) * bs
                n = total - hit_tokens
                if n > budget:
                    if not self.chunked:
                        break
                    n = budget
                need = -(-(hit_tokens + n) // bs) - len(hits)
                cached_free = self.cached_free
                evictable = 0
                if cached_free:
                    for b in hits:
                        if b in cached_free:
                            evictable += 1
                if need + evictable > self.num_free:
                    break
                waiting.popleft()
                ref = self.ref
                for b in hits:
                    if b in cached_free:
                        del cached_free[b]
                        self.num_free -= 1
                        ref[b] = 1
                    else:
                        ref[b] += 1
                req.blocks = hits
                req.n_anon = 0
                if need > 0:
                    self._alloc(req, need)
                if self.prefix_caching:
                    self.prefix_cache_queries += total
                    self.prefix_cache_hits += hit_tokens
                req.hit_tokens += hit_tokens
                req.num_computed = hit_tokens
                req.status = RUNNING
                if req.first_sched < 0:
                    req.first_sched = now
                running[req.rid] = req
                self.prefilling[req.rid] = req
                chunks.append((req, hit_tokens, n))
                budget -= n
        n_dec = self.n_dec
        if not chunks and not n_dec:
            self._plan = None
            return None
        # Decoders read their context incl. the token being computed: computed + 1 each.
        dec_ctx = self.dec_k + n_dec * s + n_dec
        attn = float(dec_ctx)
        kv_read = float(dec_ctx)
        prefill_tokens = 0
        for _req, p, c in chunks:
            prefill_tokens += c
            attn += c * p + c * (c + 1) * 0.5
            kv_read += p + c
        new_tokens = n_dec + prefill_tokens
        duration = self.perf.step_time(new_tokens, attn, kv_read, n_dec + len(chunks))
        plan = StepPlan(
            step=s,
            start=now,
            duration=duration,
            new_tokens=new_tokens,
            num_decode=n_dec,
            prefill_tokens=prefill_tokens,
            chunks=chunks,
            preempted=preempted,
        )
        self._plan = plan
        return plan

    def complete(self, now: float) -> list[Request]:
        """Apply the planned step, ending at ``now``; returns the requests that finished in it."""
        plan = self._plan
        if plan is None:
            return []
        self._plan = None
        s = plan.step
        # The gap before this step's tokens runs from the previous step's end (decoders exist only
        # when a previous step does), so wall-clock slack between steps counts in live mode.
        gap = now - self.last_end if self.n_dec else now - plan.start
        self.last_end = now
        self.step_dur.append(gap)
        n_dec = self.n_dec
        self.step_ndec.append(n_dec)
        self.generation_tokens += n_dec
        emitted = self.emitted
        if self.collect_emitted:
            emitted.clear()
            emitted.extend(r for r in self.running.values() if r.decoding)
        finished: list[Request] = []
        # Decoders whose last token came out of this step.
        done = self.finish_at.pop(s, None)
        if done:
            for req in done:
                req.fstep = -1  # already popped from finish_at
                self._materialize_finish(req, s, now)
                finished.append(req)
        bs = self.block_size
        nxt = s + 1
        for req, _p, c in plan.chunks:
            if req.status != RUNNING:
                continue
            req.num_computed += c
            if self.prefix_caching and req.n_shared > len(req.blocks):
                self._register(req, min(req.n_shared, req.num_computed // bs))
            if req.num_computed >= req.prompt_len + req.num_output:
                del self.prefilling[req.rid]
                if req.num_output == 0:
                    req.first_token = now
                    self.prompt_tokens += req.prompt_len
                else:
                    g = now - req.last_token
                    self.resumed_gaps.append(g)
                    if g > req.itl_max:
                        req.itl_max = g
                req.last_token = now
                req.num_output += 1
                self.generation_tokens += 1
                if self.collect_emitted:
                    emitted.append(req)
                if req.num_output >= req.max_out:
                    self._finish(req, now, "length")
                    finished.append(req)
                else:
                    self._add_decoder(req, nxt)
        self.step = nxt
        return finished

    def _materialize_finish(self, req: Request, s: int, now: float) -> None:
        d = s + 1 - req.s0
        req.num_computed = req.c0 + d
        req.num_output = req.o0 + d
        m = max(self.step_dur[req.s0 : s + 1])
        if m > req.itl_max:
            req.itl_max = m
        del self.buckets[req.bkey][req.rid]
        self.n_dec -= 1
        self.dec_k -= req.c0 - req.s0
        req.decoding = False
        req.last_token = now
        self._finish(req, now, "length")

    def _finish(self, req: Request, now: float, reason: str) -> None:
        self.prefilling.pop(req.rid, None)
        del self.running[req.rid]
        self._free_blocks(req, register=False)
        req.status = FINISHED
        req.finish_time = now
        req.finish_reason = reason
        self.num_finished += 1

    def finish_early(self, req: Request, reason: str = "stop") -> None:
        """End a running request before ``max_out`` (a stop string matched), between steps."""
        if req.status != RUNNING:
            return
        self._remove_running(req, self.step)
        self._free_blocks(req, register=False)
        req.status = FINISHED
        req.finish_time = req.last_token
        req.finish_reason = reason
        self.num_finished += 1
