"""The device a vLLM-CPU point file names: the CPU preset with this host's measured matmul rate."""

from __future__ import annotations

import dataclasses

import torch

from benchmarks.vllm_cpu_points import cpu_device
from engines.presets import gpu_from_dict, gpu_preset


def test_point_files_carry_the_measured_peak_as_the_cpu_device():
    before = torch.get_num_threads()
    device = cpu_device(1)
    assert torch.get_num_threads() == before  # the client's own thread count is left alone
    # Still the CPU device (so benchmarks.simulator fits CPU_FIT), only the peak replaced by a rate
    # this host measured.
    spec = gpu_from_dict(device)
    assert spec.bf16_tflops > 0
    assert dataclasses.replace(spec, bf16_tflops=gpu_preset("CPU").bf16_tflops) == gpu_preset("CPU")
