"""The gateway's benchmarks still run: each smoke mode (seconds, tiny sizes) against real processes,
checking the figures it reports are there. At one point ``benchmarks.gateway`` failed and
``benchmarks.evals`` quietly measured the direct path, because both still published a snapshot
format the gateway no longer read; nothing noticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, module: str, *args: str) -> dict:
    out = tmp_path / "figures.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("DATABASE_URL", None)  # the benchmarks' gateways never ship usage anywhere
    proc = subprocess.run(
        [sys.executable, "-m", module, *args, "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_gateway_benchmark_smoke(tmp_path):
    r = _run(tmp_path, "benchmarks.gateway")
    for key in (
        "added_ttft_p50_ms", "added_ttft_p99_ms", "added_e2e_p50_ms", "added_e2e_p99_ms", "c1", "c64",
        "ladder", "max_streams", "cpu_ms_per_request", "cpu_requests", "paced_gateway_cpu_ms_per_request",
        "load_average_at_start",
    ):  # fmt: skip
        assert key in r, key
    # Requests went through the gateway (it loaded the snapshot the benchmark published).
    assert r["c64"]["gateway_requests"] > 0 and r["cpu_requests"] > 0
    assert r["c64"]["errors"] == 0 and r["cpu_errors"] == 0


def test_gateway_slowloris_benchmark_smoke(tmp_path):
    r = _run(tmp_path, "benchmarks.gateway", "--slowloris")
    for key in (
        "legit_success_rate", "legit_p99_ms", "legit_requests", "legit_errors", "baseline_p99_ms",
        "slow_connections_target", "slow_connections_held_min", "gateway_nofile_soft_at_start",
        "gateway_nofile_after_start", "gateway_open_files_peak", "conditions",
    ):  # fmt: skip
        assert key in r, key
    assert r["legit_requests"] > 0
    assert r["gateway_nofile_soft_at_start"] == 1024
    assert r["gateway_nofile_after_start"]["soft"] == r["gateway_nofile_after_start"]["hard"]


def test_evals_benchmark_smoke_measures_through_the_gateway(tmp_path):
    r = _run(tmp_path, "benchmarks.evals")
    for key in ("eval_cases_per_s", "path", "direct", "gateway", "conditions", "gate_wall_s"):
        assert key in r, key
    assert r["path"] == "gateway", r.get("gateway_error")
    assert r["gateway"]["errors"] == 0 and r["gateway"]["cases"] == 24
