"""Virtual-time simulation (engines.sim): determinism, metrics definitions, closed loops."""

from __future__ import annotations

import numpy as np
import pytest

from engines.perf import default_efficiency
from engines.presets import gpu_preset, model_preset
from engines.scheduler import EngineConfig
from engines.sim import SimConfig, simulate
from engines.workload import Workload, fixed, fixed_concurrency, lognormal, normal, poisson

CFG = SimConfig(model=model_preset("llama-3.1-8b"), gpu=gpu_preset("H100"))
WL = Workload(arrival=poisson(15.0), input=lognormal(1000, 0.5, max=8000), output=normal(200, 60, min=2))


def test_same_seed_same_result_other_seed_differs():
    a = simulate(WL, CFG, seed=5, duration=30)
    b = simulate(WL, CFG, seed=5, duration=30)
    c = simulate(WL, CFG, seed=6, duration=30)
    for name in ("ttft_s", "tpot_s", "e2e_s", "itl_max_s", "queue_s"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True)
    assert a.summary() | {"wall_s": 0} == b.summary() | {"wall_s": 0}
    assert not np.array_equal(a.ttft_s, c.ttft_s, equal_nan=True)


def test_metric_definitions_hold_per_request():
    r = simulate(WL, CFG, seed=1, duration=20)
    done = ~np.isnan(r.e2e_s)
    assert done.all()
    assert np.all(r.ttft_s > 0) and np.all(r.e2e_s >= r.ttft_s)
    multi = r.output_len > 1
    assert np.allclose(r.tpot_s[multi], (r.e2e_s - r.ttft_s)[multi] / (r.output_len[multi] - 1))
    # The largest gap is at least the mean gap.
    assert np.all(r.itl_max_s[multi] >= r.tpot_s[multi] * (1 - 1e-9))
    assert np.all(r.queue_s >= 0) and np.all(r.queue_s <= r.ttft_s)
    # Pooled ITL covers every generated token after each request's first.
    values, weights = r.itl_values()
    assert weights.sum() == (r.output_len - 1).sum()
    assert r.generation_tokens == r.output_len.sum()
    s = r.summary()
    assert s["itl_s"]["median"] <= s["itl_s"]["p99"]
    assert s["itl_s"]["mean"] == pytest.approx(
        float(np.sum(r.tpot_s[multi] * (r.output_len[multi] - 1)) / weights.sum())
    )


def test_time_series_sampled_each_virtual_second():
    r = simulate(WL, CFG, seed=2, duration=30)
    ts = r.timeseries
    assert len(ts["t"]) >= 30
    assert np.allclose(np.diff(ts["t"]), 1.0)
    assert ts["kv_usage"].max() > 0
    assert ts["running"].max() > 0


def test_closed_loop_keeps_concurrency():
    wl = Workload(arrival=fixed_concurrency(4), input=fixed(256), output=fixed(64))
    r = simulate(wl, CFG, seed=0, n=40)
    assert r.completed == 40
    assert r.timeseries["running"].max() <= 4
    assert r.timeseries["waiting"].max() == 0
    # Throughput of a closed loop: about 4 concurrent streams of one token per TPOT.
    s = r.summary()
    assert s["output_throughput"] == pytest.approx(4 / s["tpot_s"]["median"], rel=0.25)


def test_overload_builds_a_queue_and_preempts_with_small_kv():
    cfg = SimConfig(
        model=CFG.model, gpu=CFG.gpu, engine=EngineConfig(num_gpu_blocks_override=2000, max_num_seqs=256)
    )
    wl = Workload(arrival=poisson(40.0), input=fixed(1500), output=fixed(600))
    r = simulate(wl, cfg, seed=3, duration=20)
    assert r.num_preemptions > 0
    assert r.completed == len(r.arrival_s)
    assert r.timeseries["waiting"].max() > 0
    assert r.timeseries["kv_usage"].max() > 0.9


def test_requests_longer_than_the_context_are_rejected():
    cfg = SimConfig(model=CFG.model, gpu=CFG.gpu, engine=EngineConfig(max_model_len=1024))
    wl = Workload(arrival=poisson(5.0), input=fixed(2000), output=fixed(10))
    r = simulate(wl, cfg, seed=0, n=5)
    assert r.rejected.all() and r.completed == 0


def test_idle_stretches_are_sampled_as_idle():
    wl = Workload(arrival=poisson(0.05), input=fixed(100), output=fixed(10))
    r = simulate(wl, CFG, seed=0, n=5)
    ts = r.timeseries
    # Requests take well under a second; a sample almost never sees one running.
    assert ts["running"].mean() < 0.05
    assert np.allclose(np.diff(ts["t"]), 1.0)


def test_request_overhead_adds_to_ttft_and_e2e_only():
    """The API server's fixed latency shifts TTFT and E2E by exactly its value, not TPOT or queue time."""
    wl = Workload(arrival=poisson(0.5), input=fixed(512), output=fixed(32))
    base = CFG.model, CFG.gpu
    runs = []
    for overhead in (0.0, 0.05):
        eff = default_efficiency("H100").with_(request_overhead_s=overhead)
        runs.append(simulate(wl, SimConfig(model=base[0], gpu=base[1], efficiency=eff), seed=4, n=20))
    a, b = runs
    assert np.allclose(b.ttft_s - a.ttft_s, 0.05)
    assert np.allclose(b.e2e_s - a.e2e_s, 0.05)
    assert np.allclose(b.tpot_s, a.tpot_s) and np.allclose(b.queue_s, a.queue_s)
    assert np.array_equal(a.arrival_s, b.arrival_s)  # arrivals stay the client's send times


def test_closed_loop_clients_are_staggered_not_in_lockstep():
    """With fixed lengths, lockstep clients would prefill all prompts in one step forever."""
    wl = Workload(arrival=fixed_concurrency(8), input=fixed(768), output=fixed(64))
    staggered = simulate(wl, CFG, seed=0, n=64)
    lockstep_cfg = SimConfig(model=CFG.model, gpu=CFG.gpu, stagger_closed_loop=False)
    lockstep = simulate(wl, lockstep_cfg, seed=0, n=64)
    assert staggered.completed == lockstep.completed == 64
    single = simulate(Workload(arrival=fixed_concurrency(1), input=fixed(768), output=fixed(64)), CFG, n=4)
    ttft_1 = np.median(single.ttft_s)
    # Lockstep: every cohort prefills 8 x 768 tokens in one step -> TTFT ~8x the single-stream one.
    assert np.median(lockstep.ttft_s) > 5 * ttft_1
    # Staggered: a prompt usually prefills beside the others' decodes, not beside their prefills.
    assert np.median(staggered.ttft_s) < 2 * ttft_1
    # The closed loop still holds 8 in flight once ramped up.
    assert staggered.timeseries["running"].max() <= 8


def test_requests_sent_together_reach_an_idle_engine_one_at_a_time():
    """Clients that send together: the API server hands their requests over one by one, so an idle
    engine prefills the first alone and the others together in the next step (as vLLM does), not all
    of them in one step."""

    def run(concurrency: int, n: int):
        eff = default_efficiency("H100").with_(request_overhead_s=0.003)
        cfg = SimConfig(model=CFG.model, gpu=CFG.gpu, efficiency=eff, stagger_closed_loop=False)
        wl = Workload(arrival=fixed_concurrency(concurrency), input=fixed(768), output=fixed(16))
        return simulate(wl, cfg, seed=3, n=n)

    single = run(1, 1).ttft_s[0]
    four = run(4, 4).ttft_s
    first = int(np.argmin(four))
    assert first == 0 and four[0] == pytest.approx(single, rel=0.01)  # the first sent, prefilled alone
    others = np.delete(four, 0)
    assert np.allclose(others, others[0])  # the other three shared the next prefill step
    assert others[0] > 2.5 * single  # ... after waiting for the first one's step
