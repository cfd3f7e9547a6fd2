"""Scheduler invariants (engines.scheduler), checked at every step of real runs."""

from __future__ import annotations

import math

import pytest

from engines.perf import Efficiency
from engines.presets import gpu_preset, model_preset
from engines.scheduler import FINISHED, EngineConfig, Request, Scheduler
from engines.sim import SimConfig, simulate
from engines.workload import Workload, fixed, poisson, uniform

LLAMA8B = model_preset("llama-3.1-8b")
H100 = gpu_preset("H100")


def make_sched(**cfg) -> Scheduler:
    num_blocks = cfg.pop("num_blocks", None)
    return Scheduler(model=LLAMA8B, gpu=H100, config=EngineConfig(**cfg), num_blocks=num_blocks)


def run_checked(sched: Scheduler, reqs: list[Request]) -> dict:
    """Drive ``sched`` over ``reqs`` (sorted by arrival), asserting the invariants at every step."""
    reqs = sorted(reqs, key=lambda r: r.arrival)
    now = 0.0
    i = 0
    steps = 0
    max_prefill = 0
    while True:
        while i < len(reqs) and reqs[i].arrival <= now:
            sched.add_request(reqs[i])
            i += 1
        plan = sched.schedule(now)
        if plan is None:
            if i >= len(reqs):
                break
            now = reqs[i].arrival
            continue
        steps += 1
        # Token budget and batch size.
        assert plan.new_tokens <= sched.max_batched
        assert len(sched.running) <= sched.max_num_seqs
        max_prefill = max(max_prefill, plan.prefill_tokens)
        # Every block is either free or held; never both, never more than exist. Identified blocks
        # (hits, registered) may be shared between requests; anonymous ones belong to one request.
        ids = {b for r in sched.running.values() for b in r.blocks}
        anon = sum(r.n_anon for r in sched.running.values())
        assert not ids & set(sched.cached_free)
        assert set(sched.ref) == ids
        assert len(ids) + anon + sched.num_free == sched.num_blocks
        assert sum(-e for e in sched.free_q if e < 0) + len(sched.cached_free) == sched.num_free
        assert 0.0 <= sched.kv_usage <= 1.0
        # Each scheduled request holds blocks for what it computes in this step.
        for req, start, n in plan.chunks:
            assert len(req.blocks) + req.n_anon >= math.ceil((start + n) / sched.block_size)
        for req in sched.running.values():
            if req.decoding:
                computed = req.c0 + (plan.step - req.s0)
                assert len(req.blocks) + req.n_anon >= math.ceil((computed + 1) / sched.block_size)
        now += plan.duration
        sched.complete(now)
    return {"steps": steps, "max_prefill": max_prefill, "end": now}


def test_token_budget_and_blocks_hold_under_load():
    sched = make_sched(max_num_seqs=32, max_num_batched_tokens=512)
    reqs = [Request(i, 300 + 37 * (i % 7), 50 + 13 * (i % 5), i * 0.01) for i in range(120)]
    out = run_checked(sched, reqs)
    assert all(r.status == FINISHED and r.num_output == r.max_out for r in reqs)
    assert out["max_prefill"] <= 512
    assert sched.kv_usage == 0.0 and not sched.running and not sched.waiting


def test_chunked_prefill_splits_long_prompts_over_steps():
    sched = make_sched(max_num_batched_tokens=512, max_num_seqs=4)
    req = Request(0, 2000, 3, 0.0)
    out = run_checked(sched, [req])
    # ceil(2000/512) = 4 prefill steps, then 2 decode steps.
    assert out["steps"] == 6
    assert req.num_output == 3


def test_without_chunked_prefill_a_prompt_never_splits_and_long_ones_are_refused():
    sched = make_sched(max_num_batched_tokens=1024, max_num_seqs=4, enable_chunked_prefill=False)
    reqs = [Request(i, 600, 4, 0.0) for i in range(3)]
    run_checked(sched, reqs)
    # Only one 600-token prompt fits a 1024-token step: the three prefill in three steps.
    firsts = sorted(r.first_token for r in reqs)
    assert firsts[0] < firsts[1] < firsts[2]
    with pytest.raises(ValueError, match="max_model_len"):
        sched.add_request(Request(9, 2000, 4, 0.0))


def test_preemption_when_kv_runs_out_is_counted_and_everyone_finishes():
    sched = make_sched(max_num_seqs=16, max_num_batched_tokens=2048, num_blocks=64)  # 1024 tokens of KV
    reqs = [Request(i, 100, 300, 0.0) for i in range(8)]  # wants 8 * 400 = 3200 tokens
    run_checked(sched, reqs)
    assert sched.num_preemptions > 0
    assert sum(r.n_preempted for r in reqs) == sched.num_preemptions
    assert all(r.status == FINISHED and r.num_output == 300 for r in reqs)
    # Preempted requests recompute: some of their own blocks were still cached.
    assert sched.prefix_cache_hits > 0


def test_fcfs_admission_order():
    sched = make_sched(max_num_seqs=4, max_num_batched_tokens=256)
    reqs = [Request(i, 200, 20, i * 0.001) for i in range(30)]
    run_checked(sched, reqs)
    firsts = [r.first_sched for r in sorted(reqs, key=lambda r: r.arrival)]
    assert firsts == sorted(firsts)
    assert sched.num_preemptions == 0


def test_max_num_seqs_caps_the_batch():
    sched = make_sched(max_num_seqs=3, max_num_batched_tokens=4096)
    reqs = [Request(i, 50, 40, 0.0) for i in range(10)]
    run_checked(sched, reqs)  # asserts len(running) <= 3 at every step
    assert all(r.status == FINISHED for r in reqs)


def test_prefix_cache_hits_with_shared_prefix_workload():
    cfg = SimConfig(model=LLAMA8B, gpu=H100)
    wl = Workload(
        arrival=poisson(5.0),
        input=uniform(800, 1200),
        output=fixed(20),
        shared_prefix_ratio=0.75,
        prefix_groups=2,
    )
    res = simulate(wl, cfg, seed=1, n=100)
    assert res.prefix_cache_queries > 0
    rate = res.prefix_cache_hits / res.prefix_cache_queries
    assert 0.5 < rate < 0.75
    assert (res.prefix_hit_tokens > 0).sum() >= 95
    # With prefix caching off: no hits, longer TTFT.
    off = SimConfig(model=LLAMA8B, gpu=H100, engine=EngineConfig(enable_prefix_caching=False))
    res_off = simulate(wl, off, seed=1, n=100)
    assert res_off.prefix_cache_hits == 0
    assert res_off.summary()["ttft_s"]["mean"] > res.summary()["ttft_s"]["mean"]


def test_lone_request_timing_matches_the_perf_model_exactly():
    eff = Efficiency(mfu=0.5, mbu=0.7, step_overhead_s=0.001)
    sched = Scheduler(model=LLAMA8B, gpu=H100, efficiency=eff)
    p, o = 700, 40
    req = Request(0, p, o, 0.0)
    run_checked(sched, [req])
    perf = sched.perf
    ttft = perf.step_time(p, p * (p + 1) / 2, p, 1)
    decode = [perf.step_time(1, p + j, p + j, 1) for j in range(1, o)]
    assert req.first_token == pytest.approx(ttft, rel=1e-12)
    assert req.finish_time == pytest.approx(ttft + sum(decode), rel=1e-12)
    assert req.itl_max == pytest.approx(max(decode), rel=1e-12)


def test_abort_frees_blocks():
    sched = make_sched()
    a, b = Request(0, 500, 100, 0.0), Request(1, 500, 100, 0.0)
    sched.add_request(a)
    sched.add_request(b)
    now = 0.0
    for _ in range(5):
        plan = sched.schedule(now)
        now += plan.duration
        sched.complete(now)
    assert sched.kv_usage > 0
    sched.abort(a)
    sched.abort(b)
    assert sched.schedule(now) is None
    assert sched.kv_usage == 0.0 and not sched.running


def test_requests_longer_than_the_cache_are_refused():
    sched = make_sched(num_blocks=10)
    with pytest.raises(ValueError, match="blocks"):
        sched.add_request(Request(0, 150, 20, 0.0))


def test_shared_prefix_blocks_under_eviction_pressure_keep_the_pool_consistent():
    sched = make_sched(max_num_seqs=8, max_num_batched_tokens=1024, num_blocks=120)
    groups = [[("g", g, i) for i in range(40)] for g in range(3)]
    reqs = [
        Request(i, 500 + 7 * (i % 5), 80 + 11 * (i % 3), i * 0.02, groups[i % 3], 20 + (i % 4) * 5)
        for i in range(60)
    ]
    run_checked(sched, reqs)
    assert all(r.status == FINISHED and r.num_output == r.max_out for r in reqs)
    assert sched.prefix_cache_hits > 0
    assert sched.num_free == sched.num_blocks and not sched.ref
