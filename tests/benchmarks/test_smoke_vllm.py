"""The two benchmarks that measure real vLLM still run: their ``--smoke`` runs, against the suite's
shared vLLM server (``tests/support/vllm.py``) through their ``--base-url`` option.

Each would otherwise start a vLLM server of its own, which is most of a smoke run's time (a minute
or more on a busy host); starting one is what ``engines.vllm_cpu.vllm_server_start`` does for every
test of the ``tiny-vllm`` group. As in ``test_smoke.py``, the figures of a smoke run mean nothing:
the keys are the benchmarks' contract with the README and ``docs/benchmarks.md``.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.test_smoke import smoke_run
from tests.support.vllm import MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.process, pytest.mark.xdist_group("tiny-vllm")]


def test_crosscheck_smoke_run_against_a_running_server(tiny_vllm, tiny_vllm_model, tmp_path):
    figures = smoke_run(
        "crosscheck",
        ("tool_ttft_diff_pct", "tool_tpot_diff_pct", "repeat_ttft_spread_pct", "conditions"),
        (
            "--base-url",
            tiny_vllm.base_url,
            "--model",
            str(tiny_vllm_model),
            "--served-model-name",
            MODEL_NAME,
        ),
        tmp_path,
    )
    # Both tools ran every round against that server and sent it the same output tokens.
    assert len(figures["rounds"]) == 2
    for r in figures["rounds"]:
        tokens = r["rows"]["output tokens"]
        assert tokens["governor"] == tokens["vllm"] > 0


def test_vllm_cpu_points_smoke_run_against_a_running_server(tiny_vllm, tiny_vllm_model, tmp_path):
    figures = smoke_run(
        "vllm_cpu_points",
        ("model", "gpu", "engine", "points", "meta"),
        ("--base-url", tiny_vllm.base_url, "--model", str(tiny_vllm_model)),
        tmp_path,
    )
    # One point per smoke level (1 and 2 clients) and one for the other length shape (32x4), each
    # from the server's real responses and its own histograms.
    levels = [p for p in figures["points"] if "shape" not in p]
    assert [p["concurrency"] for p in levels] == [1, 2]
    assert [p["shape"] for p in figures["points"] if "shape" in p] == ["32x4"]
    for p in figures["points"]:
        assert p["num_requests"] > 0 and p["errors"] == 0 and p["server_steps"] > 0


def test_routing_measured_rows_smoke_run_against_a_running_server(tiny_vllm, tmp_path):
    url = tiny_vllm.openai_base_url
    figures = smoke_run(
        "routing",
        ("cost_ratio", "quality_ratio", "measured", "conditions"),
        ("--measured", "--strong-url", url, "--cheap-url", url, "--copies", "rtn4g64"),
        tmp_path,
    )
    row = figures["measured"]["rtn4g64"]
    assert row["label"] == "measured" and "0 errored" in row["conditions"]["suite"]
    # The one server answered both sides greedily: the same answer to every case, from its own
    # tokens; the router's report covers the held-out quarter from all-cheap to all-strong.
    assert row["accuracy"]["same_answer_share"] == 1.0
    assert row["accuracy"]["strong"] == row["accuracy"]["cheap"]
    counts = row["operating_point"]["counts"]
    assert counts["train"] + counts["validation"] + counts["test"] == 120
    assert row["curve"][0]["cheap_share"] == 1.0 and row["curve"][-1]["cheap_share"] == 0.0


def test_voting_measured_row_smoke_run_against_a_running_server(tiny_vllm, tmp_path):
    figures = smoke_run(
        "voting",
        ("samples_saved_pct", "measured", "conditions"),
        ("--measured", "--url", tiny_vllm.openai_base_url),
        tmp_path,
    )
    m = figures["measured"]
    assert m["done"] is True and m["label"] == "measured"
    detail = m["detail"]
    # Every case got its full budget of real samples, and the adaptive vote read a prefix of them.
    assert detail["cases"] == 24 and detail["samples_fixed"] == 24 * figures["budget"]
    assert 0 < detail["samples_adaptive"] <= detail["samples_fixed"]
    assert sum(detail["stopped"].values()) == 24
