"""The device a vLLM-CPU point file names: the CPU preset with this host's measured matmul rate."""

from __future__ import annotations

import dataclasses

from benchmarks.vllm_cpu_points import cpu_device
from engines.presets import gpu_from_dict, gpu_preset


def test_point_files_carry_the_measured_peak_as_the_cpu_device():
    import torch  # here, not at the top: importing torch costs every worker seconds of collection

    before = torch.get_num_threads()
    device = cpu_device(1)
    assert torch.get_num_threads() == before  # the client's own thread count is left alone
    # Still the CPU device (so benchmarks.simulator fits CPU_FIT), only the peak replaced by a rate
    # this host measured.
    spec = gpu_from_dict(device)
    assert spec.bf16_tflops > 0
    assert dataclasses.replace(spec, bf16_tflops=gpu_preset("CPU").bf16_tflops) == gpu_preset("CPU")


def test_a_level_reports_the_engines_steps_and_tokens_per_step():
    from benchmarks.vllm_cpu_points import SERVER_HISTOGRAMS, STEP_HISTOGRAM, summarize_level

    def one_round(step_tokens_sum: float, steps: float) -> dict:
        histograms = {name: (1.0, 4.0) for name in SERVER_HISTOGRAMS.values()}
        histograms[STEP_HISTOGRAM] = (step_tokens_sum, steps)
        result = {"ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 0.7, "output_tokens": 64, "prompt_tokens": 128}
        return {"results": [result] * 4, "histograms": histograms, "wall": 2.0, "load": [1.0]}

    # Two rounds: 4 x (128 + 64) tokens each, in 70 and in 130 engine steps.
    point = summarize_level(
        [one_round(768, 70), one_round(768, 130)], concurrency=4, input_len=128, output_len=64
    )
    assert point["server_steps"] == 200
    assert point["server_step_tokens_mean"] == 1536 / 200
    assert point["server_ttft_mean_s"] == 0.25  # the other histograms keep their sum / count
