"""Every benchmark still runs: each ``python -m benchmarks.<name> --smoke`` writes its JSON keys.

A smoke run is the benchmark's own code path at tiny sizes (``benchmarks.smoke``), so a change that
breaks a benchmark breaks the suite. Its figures mean nothing and are not checked; the keys are the
benchmark's contract with the README and ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]

# name -> (keys its JSON must carry, extra arguments, marks); a name may carry a mode after a "-"
# (``gateway-swaps`` runs ``benchmarks.gateway --swaps``). The two vLLM benchmarks run against the
# suite's shared vLLM server instead (``test_smoke_vllm.py``).
BENCHMARKS = {
    "billing": (("rollup_events_per_s", "cost_page_p95_ms", "events", "conditions"), (), [pytest.mark.slow]),
    "simulator": (
        (
            "sim_hour_wall_s",
            "predictions",
            "calib_ttft_err_pct",
            "calib_tpot_err_pct",
            "calib_device",
            "calib_range",
            "calib_shape_ttft_err_pct",
            "calib_shape_tpot_err_pct",
        ),
        (),
        [],
    ),
    "harness": (
        ("max_streams_sched_ok", "client_capacity", "known_timings", "sweep_capacity", "machine"),
        (),
        [pytest.mark.slow],
    ),
    "rollouts": (("abort_s", "bad_requests_after_abort", "usage_ship_lag_ms"), (), [pytest.mark.slow]),
    "gates": (("gate_wall_s", "gate_s", "verdicts", "conditions"), (), [pytest.mark.slow]),
    "deployments": (("summary", "rounds", "ray_version"), (), [pytest.mark.ray, pytest.mark.slow]),
    "http1_parsers": (("us_per_response", "ratio_to_llhttp", "conditions"), (), []),
    "semantic_cache": (
        (
            "target_error_rate",
            "observed_error_rate",
            "observed_error_interval",
            "hit_rate",
            "best_static_threshold",
            "best_static_hit_rate",
            "hit_rate_ratio",
            "in_context",
            "lookup_ms_p50",
            "conditions",
        ),
        (),
        [],
    ),
    "voting": (
        (
            "samples_saved_pct",
            "accuracy_adaptive",
            "accuracy_fixed",
            "accuracy_delta_points",
            "budget",
            "rule",
            "measured",
            "conditions",
        ),
        (),
        [],
    ),
    "routing": (
        ("cost_ratio", "quality_ratio", "quality_ratio_interval", "operating_point", "curve", "conditions"),
        (),
        [],
    ),
    "incidents": (
        (
            "detect_s_max",
            "causes_named",
            "recover_s_max",
            "false_incidents",
            "scenarios",
            "targets_met",
            "conditions",
        ),
        (),
        [pytest.mark.slow],
    ),
    "capacity": (
        (
            "interactive_attainment",
            "interactive_attainment_without_admission",
            "gateway_cpu_ms_per_request",
            "gateway_cpu_ms_per_request_without_admission",
            "with_admission",
            "without_admission",
            "gateway_cpu_ratio_vs_plain",
            "plain_path",
            "conditions",
        ),
        # The other rows are their own modules' smoke runs below.
        ("--sections", "overload,plain"),
        [],
    ),
    "capacity_distributed": (
        (
            "max_streams_sched_ok",
            "single_process_max_streams_sched_ok",
            "tpot_ms",
            "workers",
            "client_capacity",
            "single_process_capacity",
            "conditions",
        ),
        (),
        [],
    ),
    # Two simulated engines in real time behind a gateway, isolated then shared: ~15 s.
    "capacity_isolation": (
        (
            "short_ttft_p95_ms_isolated",
            "short_ttft_p95_ms_shared",
            "short_ttft_p95_ratio",
            "long_ttft_p95_ms_isolated",
            "long_ttft_p95_ms_shared",
            "conditions",
        ),
        (),
        [],
    ),
    # An engine, a gateway restarted mid-batch, a Celery worker, a scratch database: about a minute.
    "capacity_batch": (
        (
            "batch_lines",
            "batch_lines_lost",
            "batch_lines_duplicated",
            "interactive_attainment_during_batch",
            "conditions",
        ),
        (),
        [pytest.mark.slow],
    ),
    # A private Ray head; waits on Ray's autoscaler (its metric push interval is 10 s): about a minute.
    "capacity_autoscaling": (
        ("scale_up_s", "scale_down_s", "decide_up_s", "decide_down_s", "errors", "delays", "conditions"),
        (),
        [pytest.mark.ray, pytest.mark.slow],
    ),
    # Starts an engine pair and four gateways (one per swapped piece): tens of seconds on a busy host.
    "gateway-swaps": (
        ("swaps", "cpu_ms_per_request", "paced_cpu_ms_per_request", "conditions"),
        ("--swaps",),
        [pytest.mark.slow],
    ),
}


def smoke_run(name: str, keys: tuple[str, ...], extra: tuple[str, ...], tmp_path: Path) -> dict:
    """``python -m benchmarks.<name> --smoke --json FILE [extra]``: its figures, once it exited 0 and
    wrote every key in ``keys`` and marked the run as a smoke run."""
    out = tmp_path / f"{name}.json"
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", "governor-test-secret-key-not-for-production")
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name.split('-')[0]}", "--smoke", "--json", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (
        f"benchmarks.{name} --smoke failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    figures = json.loads(out.read_text())
    missing = [key for key in keys if key not in figures]
    assert not missing, f"benchmarks.{name} --smoke wrote no {missing}"
    smoke = figures.get("smoke", figures.get("meta", {}).get("smoke"))
    assert smoke is True, f"benchmarks.{name} does not mark its smoke run as such"
    return figures


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=marks, id=name) for name, (_, _, marks) in BENCHMARKS.items()]
)
def test_benchmark_smoke_run_writes_its_figures(name, tmp_path):
    keys, extra, _ = BENCHMARKS[name]
    figures = smoke_run(name, keys, extra, tmp_path)
    if name == "capacity_isolation":
        # Both runs served what they were offered, and isolation sent the kinds where it said.
        for run in (figures["isolated_run"], figures["shared_run"]):
            for kind in ("short", "long"):
                assert run[kind]["offered"] > 0 and run[kind]["served"] == run[kind]["offered"], run
        main, long_pool = figures["isolated_run"]["engines"]
        assert long_pool["pool"] == "long-context"
        assert main["requests"] == figures["isolated_run"]["short"]["offered"]
        assert long_pool["requests"] == figures["isolated_run"]["long"]["offered"]
    if name == "capacity_batch":
        # Through the gateway restart, every line answered once and billed once.
        assert figures["batch_status"] == "completed", figures
        assert figures["batch_lines_lost"] == 0 and figures["batch_lines_duplicated"] == 0, figures
        assert figures["gateway_restarted_after_lines"] is not None
    if name == "gateway-swaps":
        # Every piece was measured both ways under both loads (the figures themselves mean nothing).
        for piece in ("redis", "upstream", "pusher"):
            row = figures["swaps"][piece]
            for x in (row, row["paced"]):
                assert x["cpu_ms_per_request_library"] > 0 and x["cpu_ms_per_request_hand_tuned"] > 0
                assert x["ratio"] == x["cpu_ms_per_request_library"] / x["cpu_ms_per_request_hand_tuned"]
