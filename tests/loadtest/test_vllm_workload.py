"""Against real vLLM on CPU (the tiny model): the harness sends the token counts it names,
by vLLM's own prompt-token counter, and ``vllm bench serve`` replays the same stage for comparison.

The server is the ``tiny-vllm`` group's shared one (its start is the slow part, ``tests/support/vllm.py``).
"""

from __future__ import annotations

import urllib.request

import pytest

from engines.workload import Workload, fixed, poisson, uniform
from loadtest import HarnessError, Sla, StageConfig, Target, run_stage
from loadtest.runner import cross_check_stage
from loadtest.tokens import SOURCE_ENDPOINT, SOURCE_TOKENIZER
from tests.support.ci import skip_unless_ci
from tests.support.vllm import MAX_MODEL_LEN, MODEL_NAME

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.xdist_group("tiny-vllm"),
]

LOOSE = Sla(ttft_ms=None, tpot_ms=None)


@pytest.fixture(scope="module")
def tiny(tiny_vllm, tiny_vllm_model):
    """The ``tiny-vllm`` group's shared server and its model directory (also its tokenizer)."""
    return tiny_vllm, str(tiny_vllm_model)


def prompt_tokens_total(server) -> float:
    text = urllib.request.urlopen(f"{server.base_url}/metrics", timeout=30).read().decode()
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:prompt_tokens_total{")
    )


@pytest.mark.parametrize("with_tokenizer", [True, False], ids=["model-tokenizer", "tokenize-endpoint"])
def test_the_server_counts_exactly_the_prompt_tokens_the_stage_names(tiny, with_tokenizer):
    server, model_dir = tiny
    target = Target(
        base_url=server.openai_base_url,
        model=MODEL_NAME,
        request_timeout_s=300,
        tokenizer=model_dir if with_tokenizer else "",
    )
    wl = Workload(
        arrival=poisson(4), input=uniform(40, 200), output=fixed(6), shared_prefix_ratio=0.5, prefix_groups=2
    )
    before = prompt_tokens_total(server)
    res = run_stage(target=target, workload=wl, stage=StageConfig(num_requests=16, seed=7), sla=LOOSE)
    after = prompt_tokens_total(server)
    s = res.summary
    assert s["failed"] == 0, s["error_samples"]
    lengths = s["lengths"]
    assert lengths["source"] == (SOURCE_TOKENIZER if with_tokenizer else SOURCE_ENDPOINT)
    requested = lengths["input"]["requested"]["mean"] * lengths["input"]["requested"]["n"]
    # vLLM's own counter moved by exactly the tokens the workload asked for (no probes in between).
    assert after - before == requested
    assert s["input_tokens"] == requested
    assert lengths["output"]["mean_error_pct"] == 0.0
    # Lengths only: whether the client kept to the arrival plan (RATE MISMATCH, CLIENT-BOUND) depends
    # on how busy the machine is, and is a benchmark figure (benchmarks.harness), not this test's.
    assert not any("LENGTH MISMATCH" in w for w in s["warnings"]), s["warnings"]


def test_a_length_above_the_served_context_is_refused_and_nothing_is_sent(tiny):
    server, _ = tiny
    target = Target(base_url=server.openai_base_url, model=MODEL_NAME, request_timeout_s=300)
    before = prompt_tokens_total(server)
    with pytest.raises(HarnessError, match=f"context of {MAX_MODEL_LEN}"):
        run_stage(
            target=target,
            workload=Workload(arrival=poisson(2), input=fixed(MAX_MODEL_LEN - 24), output=fixed(64)),
            stage=StageConfig(num_requests=4),
            sla=LOOSE,
        )
    assert prompt_tokens_total(server) == before


def test_vllm_bench_serve_replays_the_stage_and_both_tools_agree_on_what_was_sent(tiny):
    from loadtest.crosscheck import vllm_cli

    if vllm_cli() is None:
        skip_unless_ci("no vllm command")
    server, model_dir = tiny
    target = Target(
        base_url=server.openai_base_url, model=MODEL_NAME, request_timeout_s=300, tokenizer=model_dir
    )
    wl = Workload(arrival=poisson(3), input=uniform(32, 96), output=fixed(8))
    stage = StageConfig(num_requests=12, seed=3)
    res = run_stage(target=target, workload=wl, stage=stage, sla=LOOSE)
    check = cross_check_stage(
        target=target, workload=wl, stage=stage, summary=res.summary, tokenizer_dir=model_dir
    )
    rows = {r["metric"]: r for r in check["rows"]}
    assert rows["completed"]["vllm"] == rows["completed"]["governor"] == 12
    # Same requests: the same input and output token totals reached the server through both tools.
    assert rows["input tokens"]["vllm"] == rows["input tokens"]["governor"]
    assert rows["output tokens"]["vllm"] == rows["output tokens"]["governor"] == 12 * 8
    # Same arrival plan: both tools' achieved rates are measured the same way, against the plan. How
    # closely they agree depends on how busy the machine is: benchmarks.crosscheck prints that figure.
    assert rows["send delay p50"]["vllm"] is not None and rows["send delay p50"]["governor"] is not None
    assert rows["achieved offered rate"]["vllm"] > 0 and rows["achieved offered rate"]["governor"] > 0
    assert rows["median TTFT"]["vllm"] > 0 and rows["median TTFT"]["diff_pct"] is not None
    print({r["metric"]: (r["governor"], r["vllm"], r["diff_pct"]) for r in check["rows"]})
