"""Repeated calibration runs pooled into one points set (``benchmarks.simulator --pool``)."""

from __future__ import annotations

import json

import pytest

from benchmarks.simulator import calibration_figures, level_spread, pooled_points


def _run(tmp_path, name: str, ttft_c1: float, ttft_r2: float, peak: float):
    sched = [[0.0, 0.4, 1.1, 1.5]]
    data = {
        "model": {"name": "tiny-llama", "params": 4475136.0, "layers": 4, "hidden_size": 256,
                  "attention_heads": 4, "kv_heads": 2, "head_dim": 64, "vocab_size": 3072,
                  "max_context": 2048, "precision": "bf16", "kv_cache_dtype": "auto"},
        "gpu": {"name": "CPU", "memory_gib": 8, "hbm_bandwidth_gbps": 20, "bf16_tflops": peak},
        "engine": {"max_num_seqs": 16, "max_model_len": 1024, "kv_cache_gib": 1},
        "points": [
            {"concurrency": 1, "input_len": 128, "output_len": 16, "ttft_median_s": ttft_c1,
             "tpot_median_s": 0.01, "throughput_tok_s": 90.0},
            {"rate": 2.0, "input_len": 128, "output_len": 16, "ttft_median_s": ttft_r2,
             "tpot_median_s": 0.02, "throughput_tok_s": 30.0, "schedules": sched},
        ],
    }  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_levels_are_the_mean_of_the_runs_and_each_schedule_is_kept_once(tmp_path):
    a = _run(tmp_path, "a.json", 0.100, 0.300, 0.08)
    b = _run(tmp_path, "b.json", 0.140, 0.200, 0.10)
    pooled = pooled_points([a, b])
    by_level = {("c" if p.get("concurrency") else "r"): p for p in pooled["points"]}
    assert abs(by_level["c"]["ttft_median_s"] - 0.120) < 1e-12
    assert abs(by_level["r"]["ttft_median_s"] - 0.250) < 1e-12
    assert by_level["r"]["schedules"] == [[0.0, 0.4, 1.1, 1.5]]  # the same send times, once
    assert by_level["c"]["runs"] == by_level["r"]["runs"] == 2
    assert abs(pooled["gpu"]["bf16_tflops"] - 0.09) < 1e-12  # the measured peak, averaged
    assert pooled["meta"]["pooled_from"] == [str(a), str(b)]
    # The spread the pooling averages away: 100 * (max - min) / mean.
    spread = level_spread([a, b])
    assert round(spread["c1"]["ttft"]) == round(100 * 0.04 / 0.12)


def test_a_pooled_set_is_fitted_like_a_file(tmp_path):
    a = _run(tmp_path, "a.json", 0.100, 0.300, 0.08)
    b = _run(tmp_path, "b.json", 0.140, 0.200, 0.10)
    figures = calibration_figures(pooled_points([a, b]), ["c1", "r2"])
    assert figures["calib_eval"] == "in-sample"  # nothing left to hold out
    assert {r["level"] for r in figures["calib_fit_errors"]} == {"c1", "r2"}
    assert figures["calib_ttft_err_pct"] is not None


@pytest.mark.slow  # minutes of a busy machine's time: outside --fast
def test_points_of_other_length_shapes_are_held_out_and_reported_apart():
    """``vllm_cpu_points --shapes`` adds points of other lengths; the fit never sees them and their
    worst error is reported on its own (``calib_shape_*``), so "≤ 15 %" covers unseen shapes too."""
    from pathlib import Path

    from benchmarks.simulator import default_fit_levels, level_key

    data = json.loads(Path("benchmarks/calibration/avx2-2026-12-01-run1-peak.json").read_text())
    main = [p for p in data["points"] if p.get("concurrency") == 4][0]
    # The same measurement filed as another shape: its error must come out as a shape error.
    shaped = {**main, "shape": f"{main['input_len']}x{main['output_len']}"}
    data["points"].append(shaped)
    assert level_key(shaped) == f"c4@{shaped['shape']}"
    fit = default_fit_levels(data["points"])
    assert all("@" not in key for key in fit)

    figures = calibration_figures(data)
    assert figures["calib_shapes"] == [shaped["shape"]]
    held = {row["level"]: row for row in figures["calib_held_out"]}
    assert figures["calib_shape_ttft_err_pct"] == abs(held[level_key(shaped)]["ttft_err_pct"])
    assert held[level_key(shaped)]["ttft_err_pct"] == held["c4"]["ttft_err_pct"]

    without = calibration_figures({**data, "points": data["points"][:-1]})
    assert without["calib_shape_ttft_err_pct"] is None and without["calib_shapes"] == []
