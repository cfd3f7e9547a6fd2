"""Which device a measurement was made on, and whether a calibration may speak for another one.

A simulator calibration fits efficiencies to one device's measured timings. On another device the
same efficiencies can be off by orders of magnitude: an AVX2-only host's fit predicted TTFT 15× to
660× too slow on a host with AVX-512 BF16. So every measurement records its device, and a
prediction compares the calibration's device with the one it predicts for before using the fit.

- CPU hosts: the processor's model name, the instruction sets that decide matmul speed (AVX2,
  AVX-512, its BF16/VNNI extensions, AMX), the cores, and the measured dense-matmul peak.
- GPUs: the model and driver as ``nvidia-smi`` reports them, and the memory in MiB.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# Instruction sets whose presence changes vLLM-CPU's kernels (oneDNN picks AVX-512 BF16 or AMX
# paths when the CPU has them), in /proc/cpuinfo's spelling.
CPU_ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx512_fp16",
    "amx_bf16",
    "amx_tile",
)
# Two measured peaks of one device differ by the machine's noise; beyond this they are two devices.
PEAK_TOLERANCE = 0.5
# A datasheet's "80 GB" is 76,294 MiB; the driver reports 81,559 MiB on an H100 SXM: same device.
GPU_MEMORY_TOLERANCE = 0.1


def cpu_device(*, cpuinfo: str | None = None, peak_tflops: float | None = None) -> dict:
    """This host's CPU as a device record (``cpuinfo`` overrides /proc/cpuinfo, for tests)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    record = {
        "kind": "cpu",
        "model": model or "unknown",
        "isa": [flag for flag in CPU_ISA_FLAGS if flag in flags],
        "cores": cores,
    }
    if peak_tflops is not None:
        record["peak_tflops"] = round(float(peak_tflops), 4)
    return record


def gpu_devices() -> list[dict]:
    """The GPUs ``nvidia-smi`` reports (model, driver, memory in MiB), or ``[]`` without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = "--query-gpu=name,driver_version,memory.total"
    try:
        out = subprocess.run([smi, query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    devices = []
    for line in out.strip().splitlines():
        name, driver, memory = (part.strip() for part in line.split(","))
        devices.append({"kind": "gpu", "model": name, "driver": driver, "memory_mib": int(float(memory))})
    return devices


def device_differences(calibrated: dict | None, current: dict) -> list[str]:
    """Why a calibration measured on ``calibrated`` does not speak for ``current`` (empty: it does).

    A calibration that recorded no device cannot be vouched for on any device."""
    if not calibrated:
        return ["the calibration does not record the device it was measured on"]
    why = []
    if calibrated.get("kind") != current.get("kind"):
        return [f"measured on a {calibrated.get('kind')}, predicting for a {current.get('kind')}"]
    if current.get("kind") == "gpu":
        # A catalog GPU type ("H100 SXM") names its family first; nvidia-smi spells the model in full
        # ("NVIDIA H100 80GB HBM3"). Family and memory (within GPU_MEMORY_TOLERANCE) must agree.
        family = str(current.get("model", "")).split()[0].lower() if current.get("model") else ""
        if not family or family not in str(calibrated.get("model", "")).lower().split():
            why.append(f"measured on {calibrated.get('model')!r}, predicting for {current.get('model')!r}")
        a, b = calibrated.get("memory_mib"), current.get("memory_mib")
        if a and b and abs(a - b) / b > GPU_MEMORY_TOLERANCE:
            why.append(f"measured on a {a:,.0f} MiB device, predicting for {b:,.0f} MiB")
        if current.get("driver") and calibrated.get("driver") != current.get("driver"):
            why.append(f"driver {calibrated.get('driver')}, this one {current.get('driver')}")
        return why
    if calibrated.get("model") != current.get("model"):
        why.append(f"measured on {calibrated.get('model')!r}, this is {current.get('model')!r}")
    if current.get("kind") == "cpu":
        had, has = set(calibrated.get("isa") or ()), set(current.get("isa") or ())
        if had != has:
            gained = [f for f in CPU_ISA_FLAGS if f in has - had]
            lost = [f for f in CPU_ISA_FLAGS if f in had - has]
            parts = ([f"this host adds {', '.join(gained)}"] if gained else []) + (
                [f"lacks {', '.join(lost)}"] if lost else []
            )
            why.append("instruction sets differ: " + "; ".join(parts))
        if calibrated.get("cores") != current.get("cores"):
            why.append(f"measured with {calibrated.get('cores')} cores, this host has {current.get('cores')}")
        a, b = calibrated.get("peak_tflops"), current.get("peak_tflops")
        if a and b and abs(a - b) / min(a, b) > PEAK_TOLERANCE:
            why.append(f"measured matmul peak {a:g} TFLOPS, this host's {b:g}")
    return why
