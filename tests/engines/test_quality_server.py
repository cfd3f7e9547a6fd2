"""The simulated server answers eval requests per its quality profile (streaming and not)."""

from __future__ import annotations

import json

import openai
import pytest

from engines.quality import QualityProfile, answer
from engines.server import build_engine_app
from engines.tokens import estimate_tokens
from evalkit.builtin import generate
from evalkit.runner import truth_of
from evalkit.scorers import score

PROFILE = {"categories": {"arithmetic": 0.6}, "by_context": {"1024": 0.9}, "default": 0.8}


@pytest.fixture(scope="module")
def client(start_server):
    srv = start_server("--fixed-ttft-ms", "1", "--fixed-tpot-ms", "0.5", "--seed", "5",
                       "--quality-json", json.dumps(PROFILE))  # fmt: skip
    return openai.OpenAI(base_url=srv.v1, api_key="unused", max_retries=0)


def ask(client, case, **kw):
    return client.chat.completions.create(
        model="sim", messages=case.chat_messages(), max_tokens=case.max_tokens, seed=0,
        extra_body={"governor_eval": truth_of(case)}, **kw,
    )  # fmt: skip


def test_answers_are_what_the_profile_decides_and_usage_is_counted(client):
    profile = QualityProfile.from_dict(PROFILE)
    cases = generate("arithmetic", seed=9, n=60)
    right = 0
    for case in cases:
        r = ask(client, case)
        text = r.choices[0].message.content
        want, ok = answer(
            profile, truth_of(case), seed=5, prompt_text=f"user: {case.chat_messages()[0]['content']}\n"
        )
        assert text == want
        assert score(case, text) == float(ok)
        right += ok
        assert r.choices[0].finish_reason == "stop"
        assert r.usage.completion_tokens == len(text.split())
        assert r.usage.prompt_tokens == estimate_tokens(case.chat_messages()[0]["content"]) + 4 + 2
    assert 0 < right < len(cases)  # 0.6: some right, some wrong


def test_streaming_carries_the_same_answer(client):
    for case in generate("json_extraction", seed=1, n=5) + generate("refusal", seed=1, n=4):
        whole = ask(client, case).choices[0].message.content
        chunks = list(ask(client, case, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole
        assert chunks[-1].usage.completion_tokens == len([c for c in chunks if c.choices])


def test_max_tokens_cuts_the_answer(client):
    case = generate("refusal", seed=1, n=1)[0]
    r = client.chat.completions.create(model="sim", messages=case.chat_messages(), max_tokens=3, seed=0,
                                       extra_body={"governor_eval": truth_of(case)})  # fmt: skip
    assert r.choices[0].finish_reason == "length" and len(r.choices[0].message.content.split()) == 3


def test_bad_truth_is_a_400_naming_governor_eval(client):
    case = generate("arithmetic", seed=1, n=1)[0]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="sim", messages=case.chat_messages(), max_tokens=5,
                                       extra_body={"governor_eval": {"category": "arithmetic"}})  # fmt: skip
    assert err.value.body["param"] == "governor_eval"


def test_without_a_profile_the_truth_is_ignored(start_server):
    srv = start_server("--fixed-ttft-ms", "1", "--fixed-tpot-ms", "0.5")
    c = openai.OpenAI(base_url=srv.v1, api_key="unused", max_retries=0)
    case = generate("arithmetic", seed=1, n=1)[0]
    r = ask(c, case)
    assert r.usage.completion_tokens == case.max_tokens  # the usual synthetic words
    assert score(case, r.choices[0].message.content) == 0.0


def test_serve_args_carry_the_profile_and_reject_a_bad_one():
    app = build_engine_app(
        {"model_name": "m", "quality": PROFILE, "seed": 3, "fixed_ttft_ms": 1, "fixed_tpot_ms": 1}
    )
    assert app.quality == QualityProfile.from_dict(PROFILE) and app.seed == 3
    assert build_engine_app({"model_name": "m"}).quality is None
    with pytest.raises(ValueError, match="default"):
        build_engine_app({"model_name": "m", "quality": {"default": 2}})
