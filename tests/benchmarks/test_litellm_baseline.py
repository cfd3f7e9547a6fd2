"""``benchmarks.gateway --baseline litellm``: the LiteLLM proxy measured beside the gateway.

The ratio comes from two measured figures and nothing else; a baseline that cannot run, or that
failed its streams, stops the benchmark without figures; LiteLLM stays out of Governor's own
dependencies (the ``bench`` extra pins what the benchmark installs into its own virtualenv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmarks.gateway import BaselineFailed, baseline_figures, pool_windows
from benchmarks.litellm_baseline import LITELLM_REQUIREMENT, LiteLLMUnavailable, proxy_config, resolve_python

ROOT = Path(__file__).resolve().parents[2]


def _window(cpu_s: float, requests: int, errors: int = 0, seconds: float = 6.0) -> dict:
    return {"cpu_s": cpu_s, "requests": requests, "errors": errors, "seconds": seconds}


def test_the_ratio_is_litellms_cpu_per_stream_over_the_gateways():
    gateway = pool_windows([_window(2.0, 4000), _window(2.5, 5000)])  # 0.5 ms per stream
    litellm = pool_windows([_window(4.0, 100), _window(5.0, 100)])  # 45 ms per stream
    figures = baseline_figures(gateway, litellm)
    assert figures["cpu_ms_per_request"] == pytest.approx(0.5)
    assert figures["litellm_cpu_ms_per_request"] == pytest.approx(45.0)
    assert figures["litellm_cpu_ratio"] == pytest.approx(90.0)
    assert figures["requests_per_s"] == pytest.approx(9000 / 12)
    assert figures["litellm_requests_per_s"] == pytest.approx(200 / 12)
    assert figures["litellm_throughput_ratio"] == pytest.approx(200 / 9000)
    assert (figures["cpu_requests"], figures["litellm_cpu_requests"]) == (9000, 200)


@pytest.mark.parametrize(
    "litellm",
    [_window(1.0, 0), _window(1.0, 90, errors=10)],
    ids=["completed-nothing", "failed-a-tenth"],
)
def test_a_baseline_that_did_not_serve_the_load_reports_nothing(litellm):
    with pytest.raises(BaselineFailed, match="LiteLLM's proxy completed"):
        baseline_figures(_window(1.0, 1000), litellm)


def test_the_bench_extra_pins_what_the_benchmark_installs_and_litellm_stays_out_of_the_main_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["bench"] == [LITELLM_REQUIREMENT]
    assert not [d for d in project["dependencies"] if d.lower().startswith("litellm")]


def test_the_proxy_config_serves_the_gateways_model_from_the_same_upstream_at_the_same_prices():
    config = proxy_config(
        upstream_base_url="http://127.0.0.1:9/v1",
        model="bench-llama",
        master_key="sk-bench-x",
        redis_url="redis://127.0.0.1:6379/3",
        prices={"input_nanos": 100, "output_nanos": 300},
    )
    (entry,) = config["model_list"]
    assert entry["model_name"] == "bench-llama"
    assert entry["litellm_params"]["api_base"] == "http://127.0.0.1:9/v1"
    assert entry["model_info"] == {"input_cost_per_token": 1e-7, "output_cost_per_token": 3e-7}
    assert config["general_settings"] == {"master_key": "sk-bench-x"}
    assert config["router_settings"]["redis_url"] == "redis://127.0.0.1:6379/3"


def test_an_interpreter_without_litellm_is_refused_naming_it(tmp_path):
    missing = tmp_path / "no-python"
    with pytest.raises(LiteLLMUnavailable, match="no-python"):
        resolve_python(str(missing), install=False)


def test_without_litellm_the_benchmark_says_so_and_exits_non_zero_without_figures(tmp_path):
    out = tmp_path / "figures.json"
    env = dict(os.environ, GOVERNOR_LITELLM_PYTHON=str(tmp_path / "no-python"))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gateway", "--baseline", "litellm", "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "LiteLLM baseline unavailable, nothing measured" in done.stderr
    assert not out.exists()


def _litellm_or_skip() -> None:
    try:
        resolve_python(install=False)
    except LiteLLMUnavailable as exc:
        pytest.skip(f"no LiteLLM proxy here ({exc}); `python -m benchmarks.litellm_baseline` installs it")


@pytest.mark.slow
def test_the_baseline_smoke_run_measures_both_proxies_and_divides(tmp_path):
    _litellm_or_skip()
    out = tmp_path / "figures.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.gateway", "--baseline", "litellm", "--cpu-only", "--smoke",
            "--json", str(out),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["cpu_requests"] > 0 and r["litellm_cpu_requests"] > 0
    assert r["cpu_errors"] == 0 and r["litellm_cpu_errors"] == 0
    assert r["cpu_ms_per_request"] > 0 and r["litellm_cpu_ms_per_request"] > 0
    assert r["litellm_cpu_ratio"] == pytest.approx(r["litellm_cpu_ms_per_request"] / r["cpu_ms_per_request"])
    assert r["litellm_version"] in LITELLM_REQUIREMENT
    for key in ("governor", "litellm", "upstream", "request", "load", "cpu"):
        assert r["baseline_conditions"][key]
