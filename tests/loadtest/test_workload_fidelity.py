"""The harness sends the workload it names: exact token lengths, the named offered rate, warm-up apart."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from engines.workload import Workload, constant, fixed, parse_empirical, poisson, uniform
from loadtest import HarnessError, Sla, StageConfig, Target, run_stage
from loadtest.metrics import WORKLOAD_TOLERANCE_PCT, offered_rate_report
from loadtest.prompts import build_prompts
from loadtest.records import RequestRecord
from loadtest.runner import build_plan
from loadtest.tokens import SOURCE_ENDPOINT, SOURCE_USAGE, LocalTokenizer, TokenCounter
from tests.support.servers import ROOT, engines_fixed_server, paced_server

LOOSE = Sla(ttft_ms=None, tpot_ms=None)


@pytest.fixture(scope="module")
def tiny_tokenizer() -> LocalTokenizer:
    from engines.tiny_model import ensure_tiny_model

    return LocalTokenizer(ensure_tiny_model(ROOT / "var/models/tiny-llama"))


def test_prompts_have_the_requested_token_count_for_the_model_tokenizer(tiny_tokenizer):
    rng = np.random.default_rng(4)
    lens = rng.integers(12, 300, size=300)
    groups = rng.integers(0, 3, size=300)
    plen = (lens * 0.6).astype(np.int64)
    prompts = build_prompts(
        input_len=lens, prefix_group=groups, prefix_len=plen, seed=2, counter=tiny_tokenizer
    )
    counts = tiny_tokenizer.count_many(prompts)
    assert counts == lens.tolist()
    # Requests of a group share exactly min(prefix_len) tokens, counted with the model's tokenizer.
    ids = [tiny_tokenizer._tok.encode(p).ids for p in prompts[:40]]
    for i in range(40):
        for j in range(i):
            k = min(plen[i], plen[j])
            if groups[i] == groups[j]:
                assert ids[i][:k] == ids[j][:k]
            else:
                assert ids[i][: k + 1] != ids[j][: k + 1]


def test_a_prompt_longer_than_the_context_is_refused_before_anything_is_built(tiny_tokenizer):
    wl = Workload(arrival=constant(5), input=fixed(tiny_tokenizer.max_model_len + 1), output=fixed(4))
    with pytest.raises(HarnessError, match="context"):
        build_plan(wl, StageConfig(num_requests=3), tiny_tokenizer)


def _prompt_tokens_total(base_url: str) -> float:
    text = urllib.request.urlopen(base_url[: -len("/v1")] + "/metrics", timeout=5).read().decode()
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:prompt_tokens_total")
    )


@pytest.mark.process
def test_the_simulated_engine_gets_exact_lengths_through_its_tokenize_endpoint():
    with engines_fixed_server(5, 1, "--max-model-len", "1024") as url:
        wl = Workload(arrival=constant(20), input=uniform(20, 200), output=uniform(3, 9))
        res = run_stage(
            target=Target(base_url=url, model="paced"),
            workload=wl,
            stage=StageConfig(num_requests=30, warmup_requests=3),
            sla=LOOSE,
        )
        lengths = res.summary["lengths"]
        assert lengths["source"] == SOURCE_ENDPOINT
        assert lengths["input"]["mean_error_pct"] == 0.0
        assert lengths["input"]["actual"]["p50"] == lengths["input"]["requested"]["p50"]
        assert lengths["output"]["mean_error_pct"] == 0.0
        assert not any("LENGTH MISMATCH" in w for w in res.summary["warnings"]), res.summary["warnings"]
        # Warm-up requests are counted apart and in no figure; the server saw them all.
        assert res.summary["requests"] == 30 and res.summary["warmup"] == {"requests": 3, "failed": 0}
        served = _prompt_tokens_total(url)
        assert served > res.summary["input_tokens"]

        # The same server with a counter that is wrong for it (words, not characters / 4): flagged.
        res = run_stage(
            target=Target(base_url=url, model="paced"),
            workload=wl,
            stage=StageConfig(num_requests=10),
            sla=LOOSE,
            counter=TokenCounter(),
        )
        assert any(w.startswith("LENGTH MISMATCH: mean actual input") for w in res.summary["warnings"])

        # Above the server's context: nothing is sent.
        before = _prompt_tokens_total(url)
        with pytest.raises(HarnessError, match="context of 1024"):
            run_stage(
                target=Target(base_url=url, model="paced"),
                workload=Workload(arrival=constant(5), input=fixed(1000), output=fixed(100)),
                stage=StageConfig(num_requests=3),
                sla=LOOSE,
            )
        assert _prompt_tokens_total(url) == before


@pytest.mark.process
def test_without_a_tokenizer_lengths_are_calibrated_on_usage_and_the_rate_is_the_named_one():
    # The paced server counts words and has no /tokenize: the usage calibration learns that.
    with paced_server("--ttft-ms", "5", "--tpot-ms", "1") as url:
        wl = Workload(arrival=poisson(25), input=uniform(10, 80), output=fixed(4))
        res = run_stage(
            target=Target(base_url=url, model="paced"),
            workload=wl,
            stage=StageConfig(num_requests=60),
            sla=LOOSE,
        )
    s = res.summary
    assert s["lengths"]["source"] == SOURCE_USAGE
    assert abs(s["lengths"]["input"]["mean_error_pct"]) <= 2.0
    offered = s["offered"]
    # 60 Poisson requests at 25 req/s span exactly 60 / 25 s: the schedule offers the named rate.
    assert offered["window_s"] == pytest.approx(60 / 25)
    assert offered["planned_offered_rate"] == pytest.approx(25.0)
    # What the client achieved depends on how busy the machine is (a benchmark figure,
    # benchmarks.harness); the behaviour is that it is measured and flagged exactly when it is off.
    err = offered["offered_rate_error_pct"]
    assert err is not None
    assert any("RATE MISMATCH" in w for w in s["warnings"]) == (abs(err) > WORKLOAD_TOLERANCE_PCT)


def test_both_spacing_conventions_put_n_requests_in_n_over_rate_seconds():
    for kind in ("window", "vllm"):
        wl = Workload.from_dict(
            {
                "arrival": {"kind": "poisson", "rate": 8, "spacing": kind},
                "input": fixed(8).to_dict(),
                "output": fixed(8).to_dict(),
            }
        )
        sched = wl.sample_requests(100, seed=5)
        assert sched.window_s == pytest.approx(100 / 8)
        if kind == "vllm":
            assert sched.arrival_s[-1] == pytest.approx(100 / 8) and sched.arrival_s[0] > 0
        else:
            assert sched.arrival_s[0] == 0.0 and sched.arrival_s[-1] < 100 / 8
    by_duration = Workload(arrival=poisson(8), input=fixed(8), output=fixed(8)).sample_requests(
        duration=20, seed=1
    )
    assert len(by_duration) == 160 and by_duration.window_s == pytest.approx(20.0)


def test_a_client_that_falls_behind_is_flagged_as_offering_less_than_named():
    planned = [type("P", (), {"index": i})() for i in range(50)]
    # Each request 10 ms later than the one before: the client sends at 10 / 1.1 req/s.
    records = [RequestRecord(index=i, planned_s=1 + i * 0.1, sent_s=1 + i * 0.11) for i in range(50)]
    rep = offered_rate_report(records, planned, named_rate=10.0, window_s=5.0)
    assert rep["figures"]["achieved_offered_rate"] == pytest.approx(10 / 1.1)
    assert rep["warnings"] and rep["warnings"][0].startswith("RATE MISMATCH")
    on_time = [RequestRecord(index=i, planned_s=1 + i * 0.1, sent_s=1.002 + i * 0.1) for i in range(50)]
    on_time[0].sent_s += 0.15  # one late first send (a connection opening) is not a lower rate
    at_zero = [RequestRecord(index=i, planned_s=i * 0.1, sent_s=i * 0.1) for i in range(50)]
    assert offered_rate_report(at_zero, planned, named_rate=10.0, window_s=5.0)["figures"][
        "achieved_offered_rate"
    ] == pytest.approx(10.0)  # a request sent at exactly t = 0 counts
    assert not offered_rate_report(on_time, planned, named_rate=10.0, window_s=5.0)["warnings"]


@pytest.mark.parametrize(
    "raw,message",
    [
        (b"", "no rows"),
        (b"\xff\xfe\x00bad", "not UTF-8"),
        (
            b'{"input_len": 10, "output_len": 5}\n{"input_len": 0, "output_len": 5}\n',
            ":2: lengths must be >= 1",
        ),
        (b'{"input_len": -3, "output_len": 5}\n', ":1: lengths must be >= 1"),
        (b'{"input_len": 1.5, "output_len": 5}\n', ":1: needs integer"),
    ],
)
def test_bad_length_files_are_refused_with_the_line_named(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_empirical(raw, name="lengths.jsonl")


@pytest.mark.parametrize("rate", [0, -1, float("inf"), float("nan")])
def test_a_rate_that_is_not_a_positive_number_is_refused(rate):
    with pytest.raises(ValueError, match="rate > 0"):
        poisson(rate)
