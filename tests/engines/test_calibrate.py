"""Calibration recovers known efficiency parameters from points the simulator produced."""

from __future__ import annotations

import json

import pytest

from engines.calibrate import calibrate, load_points, simulate_point
from engines.perf import Efficiency
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
