"""Calibration recovers known efficiency parameters from points the simulator produced."""

from __future__ import annotations

import json

import pytest

from engines.calibrate import calibrate, load_points, simulate_point
from engines.perf import Efficiency, default_efficiency
from engines.presets import gpu_preset, model_preset
from engines.scheduler import EngineConfig

LLAMA8B = model_preset("llama-3.1-8b")
H100 = gpu_preset("H100")
ENGINE = EngineConfig(max_num_seqs=64, max_model_len=8192)
TRUE = Efficiency(mfu=0.45, mbu=0.65, step_overhead_s=0.002)
LOADS = [
    {"concurrency": 1, "input_len": 128, "output_len": 128},
    {"concurrency": 1, "input_len": 4096, "output_len": 32},
    {"concurrency": 64, "input_len": 2048, "output_len": 256},
    {"rate": 4.0, "input_len": 1024, "output_len": 128},
    {"concurrency": 16, "input_len": 512, "output_len": 512},
]


@pytest.mark.slow
def test_calibration_recovers_known_parameters(tmp_path):
    points = []
    for load in LOADS:
        measured = simulate_point(load, model=LLAMA8B, gpu=H100, engine_config=ENGINE, efficiency=TRUE)
        points.append({**load, **measured})
    path = tmp_path / "points.json"
    path.write_text(json.dumps({"points": points}))
    result = calibrate(load_points(path), LLAMA8B, H100, ENGINE)
    assert result.params.mfu == pytest.approx(0.45, rel=0.05)
    assert result.params.mbu == pytest.approx(0.65, rel=0.1)
    assert result.params.step_overhead_s == pytest.approx(0.002, rel=0.3)
    errors = result.mean_abs_error_pct()
    assert errors["ttft"] < 2 and errors["tpot"] < 2 and errors["throughput"] < 2
    # predict() on a held-out load.
    held_out = {"rate": 8.0, "input_len": 768, "output_len": 200}
    truth = simulate_point(held_out, model=LLAMA8B, gpu=H100, engine_config=ENGINE, efficiency=TRUE)
    row = result.predict([{**held_out, **truth}])[0]
    assert abs(row["tpot_err_pct"]) < 5 and abs(row["ttft_err_pct"]) < 10
    assert json.dumps(result.as_dict())


def test_points_need_a_load_shape():
    with pytest.raises(ValueError):
        calibrate([{"input_len": 10, "output_len": 10, "ttft_median_s": 1}], LLAMA8B, H100, ENGINE)


@pytest.mark.process
def test_cpu_style_fit_with_per_sequence_overhead():
    from engines.specs import ModelSpec

    tiny = ModelSpec(
        name="tiny", params=5e6, layers=4, hidden_size=256, attention_heads=4, kv_heads=2, head_dim=64,
        vocab_size=4096, max_context=1024,
    )  # fmt: skip
    cpu = gpu_preset("CPU")
    engine = EngineConfig(kv_cache_gib=1, max_model_len=1024, max_num_batched_tokens=2048)
    # The request overhead is not fitted here: the truth carries the base (CPU default) value.
    true = default_efficiency("CPU").with_(
        mfu=0.05, mbu=0.3, step_overhead_s=0.012, per_seq_overhead_s=0.0004
    )
    loads = [
        {"concurrency": 1, "input_len": 64, "output_len": 64},
        {"concurrency": 1, "input_len": 768, "output_len": 16},
        {"concurrency": 32, "input_len": 128, "output_len": 128},
        {"concurrency": 8, "input_len": 256, "output_len": 64},
    ]
    points = [
        {**load, "num_requests": 16, **simulate_point({**load, "num_requests": 16}, model=tiny, gpu=cpu,
                                                        engine_config=engine, efficiency=true)}
        for load in loads
    ]  # fmt: skip
    result = calibrate(points, tiny, cpu, engine, fit=("mfu", "mbu", "step_overhead_s", "per_seq_overhead_s"))
    errors = result.mean_abs_error_pct()
    assert errors["ttft"] < 3 and errors["tpot"] < 3
    # Per-sequence overhead and the KV-read term both grow with concurrency, so the split between
    # them is loose; what must hold is the prediction at an unseen load. With staggered closed-loop
    # clients (engines.sim) the fit lands in a shallow minimum with MBU ~0.05 and a larger
    # per-sequence cost: in-sample < 3%, held-out TPOT ~9% at twice the fitted concurrency.
    held_out = {"concurrency": 16, "input_len": 384, "output_len": 96, "num_requests": 16}
    truth = simulate_point(held_out, model=tiny, gpu=cpu, engine_config=engine, efficiency=true)
    row = result.predict([{**held_out, **truth}])[0]
    assert abs(row["tpot_err_pct"]) < 10 and abs(row["ttft_err_pct"]) < 10
    with pytest.raises(ValueError):
        calibrate(points, tiny, cpu, engine, fit=("nonsense",))


@pytest.mark.slow  # minutes of a busy machine's time: outside --fast
def test_cpu_fit_recovers_request_overhead_and_predicts_held_out_levels():
    """vLLM-CPU style: the API server's fixed latency is fitted beside MFU and the step overheads.

    Points are simulated with known parameters on two load levels plus a long-prompt single stream
    (which separates MFU from the request overhead in TTFT); the other levels are predicted.
    """
    from engines.calibrate import CPU_FIT
    from engines.specs import ModelSpec

    tiny = ModelSpec(
        name="tiny", params=4.5e6, layers=4, hidden_size=256, attention_heads=4, kv_heads=2, head_dim=64,
        vocab_size=3072, max_context=2048,
    )  # fmt: skip
    cpu = gpu_preset("CPU")
    engine = EngineConfig(kv_cache_gib=1, max_model_len=1024, max_num_seqs=16, block_size=128)
    true = Efficiency(mfu=0.4, mbu=0.5, step_overhead_s=0.003, per_seq_overhead_s=0.0002,
                      request_overhead_s=0.012)  # fmt: skip

    def point(load: dict) -> dict:
        load = {"input_len": 128, "output_len": 64, "num_requests": 48, **load}
        return {**load, **simulate_point(load, model=tiny, gpu=cpu, engine_config=engine, efficiency=true)}

    fit_points = [
        point({"concurrency": 1}),
        point({"concurrency": 1, "input_len": 768}),
        point({"concurrency": 8}),
    ]
    result = calibrate(fit_points, tiny, cpu, engine, fit=CPU_FIT)
    p = result.params
    assert p.request_overhead_s == pytest.approx(0.012, rel=0.1)
    assert p.mfu == pytest.approx(0.4, rel=0.05)
    assert p.step_overhead_s == pytest.approx(0.003, rel=0.1)
    assert p.per_seq_overhead_s == pytest.approx(0.0002, rel=0.3)
    assert p.mbu == true.mbu  # not fitted for CPU
    held = result.predict([point({"concurrency": 2}), point({"concurrency": 4})])
    errors = result.median_abs_error_pct(held)
    assert errors["ttft"] < 5 and errors["tpot"] < 5


def test_an_open_loop_point_is_replayed_at_its_own_send_times():
    """Poisson medians depend on which requests overlapped: the point's recorded schedule is replayed."""
    eff = default_efficiency("H100")
    base = {"rate": 4.0, "input_len": 2048, "output_len": 64, "ttft_median_s": 0.1, "tpot_median_s": 0.01}
    burst = {**base, "schedules": [[0.0] * 16]}
    spread = {**base, "schedules": [[i * 5.0 for i in range(16)]]}
    kw = {"model": LLAMA8B, "gpu": H100, "engine_config": ENGINE, "efficiency": eff}
    at_once = simulate_point(burst, **kw)
    apart = simulate_point(spread, **kw)
    # Sixteen 2k prompts at once queue behind each other's prefill; five seconds apart they never meet.
    assert at_once["ttft_median_s"] > 2 * apart["ttft_median_s"]
    assert at_once["tpot_median_s"] > apart["tpot_median_s"]
    # Two rounds pool their requests: the median of (burst + spread) lies between the two.
    both = simulate_point({**base, "schedules": burst["schedules"] + spread["schedules"]}, **kw)
    assert apart["ttft_median_s"] <= both["ttft_median_s"] <= at_once["ttft_median_s"]


def test_a_closed_loop_that_started_together_is_simulated_that_way():
    """Clients that sent their first requests at once prefill together: TTFT grows with the level,
    unlike the staggered start the simulator assumes when a point does not say."""
    load = {"concurrency": 8, "input_len": 768, "output_len": 64, "num_requests": 64}
    kw = dict(model=LLAMA8B, gpu=H100, engine_config=ENGINE, efficiency=TRUE)
    single = simulate_point({**load, "concurrency": 1, "num_requests": 4}, **kw)["ttft_median_s"]
    staggered = simulate_point(load, **kw)["ttft_median_s"]
    together = simulate_point({**load, "clients_start": "together"}, **kw)["ttft_median_s"]
    assert together > 3 * single  # the eight prompts keep sharing their prefill steps
    assert staggered < 2 * single


@pytest.mark.process
def test_the_engines_own_ttft_splits_prefill_from_the_request_overhead_at_one_prompt_length():
    """Every fitted level at one prompt length: the client's TTFT alone cannot tell the API server's
    latency from the prefill's cost per token. vLLM's own queue + prefill means (``server_*_mean_s``)
    can, and a prompt four times longer, never fitted on, is predicted from them."""
    from engines.calibrate import CPU_FIT, measured_engine_ttft
    from engines.specs import ModelSpec

    tiny = ModelSpec(
        name="tiny", params=4.5e6, layers=4, hidden_size=256, attention_heads=4, kv_heads=2, head_dim=64,
        vocab_size=3072, max_context=2048,
    )  # fmt: skip
    cpu = gpu_preset("CPU")
    engine = EngineConfig(kv_cache_gib=1, max_model_len=1024, max_num_seqs=16, block_size=128)
    # A slow prefill per token and a large API-server latency, as on a busy 2-core host.
    true = Efficiency(mfu=0.05, mbu=0.5, step_overhead_s=0.004, per_seq_overhead_s=0.0002,
                      request_overhead_s=0.030)  # fmt: skip

    def point(load: dict) -> dict:
        load = {"input_len": 128, "output_len": 64, "num_requests": 24, "clients_start": "together", **load}
        measured = simulate_point(load, model=tiny, gpu=cpu, engine_config=engine, efficiency=true)
        # What vLLM's histograms report: the engine's TTFT (queue + prefill), here all of it as prefill.
        return {**load, **measured, "server_queue_mean_s": 0.0,
                "server_prefill_mean_s": measured["engine_ttft_mean_s"]}  # fmt: skip

    # One stream, and two clients that keep apart (staggered): no step ever prefills two prompts.
    fit_points = [point({"concurrency": 1}), point({"concurrency": 2, "clients_start": "staggered"})]
    assert measured_engine_ttft(fit_points[0]) == pytest.approx(fit_points[0]["engine_ttft_mean_s"])
    result = calibrate(fit_points, tiny, cpu, engine, fit=CPU_FIT)
    assert result.params.mfu == pytest.approx(0.05, rel=0.1)
    assert result.params.request_overhead_s == pytest.approx(0.030, rel=0.1)
    (row,) = result.predict([point({"concurrency": 4, "input_len": 512, "output_len": 32})])
    assert abs(row["ttft_err_pct"]) < 5 and abs(row["tpot_err_pct"]) < 5
    assert abs(row["engine_ttft_err_pct"]) < 5
