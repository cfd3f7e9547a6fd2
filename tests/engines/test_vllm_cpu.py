"""Real vLLM (CPU backend) serving the locally trained tiny Llama: OpenAI streaming and Prometheus metrics.

Startup takes ~45 s alone and several minutes on a busy 2-core host; the files of the ``tiny-vllm``
group share one server (``tests/support/vllm.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.tiny_model import HEAD_DIM, MARKER, ensure_tiny_model
from gateway.engine_signals import metrics_url, parse_engine_metrics
from tests.support.vllm import MODEL_NAME, require_vllm  # noqa: F401  (require_vllm: re-exported)

ROOT = Path(__file__).resolve().parents[2]
# Its tests share the tiny vLLM server with the other files of the group (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("tiny-vllm")


def metric_samples(text: str) -> dict[str, float]:
    """Prometheus exposition → {sample name: value summed over label sets}."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_tiny_model_is_generated_once_with_a_cpu_friendly_shape(tmp_path):
    path = ensure_tiny_model(tmp_path / "tiny", seed=3)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] == HEAD_DIM == config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"]) >= config["vocab_size"] - 8
    tok_config = json.loads((path / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in tok_config["chat_template"]
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(path, seed=3) == path  # same seed: nothing rewritten
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    ensure_tiny_model(path, seed=4)  # another seed replaces it
    assert json.loads((path / MARKER).read_text())["seed"] == 4


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_streamed_chat_completion_carries_content_and_usage(tiny_vllm):
    client = openai.OpenAI(base_url=tiny_vllm.openai_base_url, api_key="unused", timeout=300)
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": "Tell me about continuous batching."}],
        max_tokens=24,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},  # fix the length instead of hoping for EOS
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    # Tokens arrive as separate SSE events, not one blob. How many events is up to vLLM: its
    # RequestOutputCollector merges deltas when the engine gets ahead of the API server's event
    # loop, which on a busy 2-core machine can fold 24 tokens into two or three events.
    assert len(content) >= 2
    assert "".join(c.choices[0].delta.content for c in content).strip()
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # the usage-only final chunk
    usage = chunks[-1].usage
    assert usage.completion_tokens == 24
    assert usage.prompt_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_completion_with_token_ids_and_model_list(tiny_vllm):
    client = openai.OpenAI(base_url=tiny_vllm.openai_base_url, api_key="unused", timeout=300)
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]
    done = client.completions.create(
        model=MODEL_NAME, prompt=list(range(10, 74)), max_tokens=8, extra_body={"ignore_eos": True}
    )
    assert done.usage.prompt_tokens == 64 and done.usage.completion_tokens == 8


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_metrics_use_vllm_names_and_count_the_work(tiny_vllm):
    client = openai.OpenAI(base_url=tiny_vllm.openai_base_url, api_key="unused", timeout=300)
    client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=4, extra_body={"ignore_eos": True})
    text = httpx.get(f"{tiny_vllm.base_url}/metrics", timeout=30).text
    values = metric_samples(text)
    assert values["vllm:num_requests_running"] == 0  # nothing in flight now
    assert "vllm:num_requests_waiting" in values and "vllm:kv_cache_usage_perc" in values
    assert values["vllm:generation_tokens_total"] >= 4
    assert values["vllm:prompt_tokens_total"] > 0
    assert values["vllm:time_to_first_token_seconds_count"] >= 1
    assert values["vllm:e2e_request_latency_seconds_count"] >= 1
    # The gateway's admission control reads this very page (gateway.engine_signals), found beside
    # the OpenAI API, and takes the queue and KV usage vLLM reports.
    assert metrics_url(tiny_vllm.openai_base_url) == f"{tiny_vllm.base_url}/metrics"
    load = parse_engine_metrics(text, at=0)
    assert load is not None and load.waiting == values["vllm:num_requests_waiting"] == 0
    assert load.kv_usage == values["vllm:kv_cache_usage_perc"] and not load.saturated()
