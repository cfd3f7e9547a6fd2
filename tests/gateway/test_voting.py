"""Adaptive voting (gateway.voting, gateway.vote_forward; docs/voting.md, ADR 0041).

The stopping rule against hand-computed cases and a numerical Beta integral; then whole requests
through the in-process gateway (tests/gateway/inproc.py) with a fake engine whose samples say what
the test scripted: a vote stops early when they agree, goes to its budget when they do not, never
spends past the tenant's samples for the month, is metered (spent, saved) and held for its worst
case, and bad input is a 400 that holds and meters nothing."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import vote_forward
from gateway.voting import (
    MAX_SAMPLES_CAP,
    Tally,
    VoteError,
    VoteSpec,
    extract,
    leader_probability,
    parse_spec,
    round_size,
    run,
    should_stop,
)
from tests.gateway.inproc import PROMPT_TOKENS, FakeEngine, _response, chat, snapshot, target, tenant_budget

# ------------------------------------------------------------------ the rule


def _beta_sf_half(alpha: int, beta: int, steps: int = 20_000) -> float:
    """P(X > 1/2) for X ~ Beta(alpha, beta) by Simpson's rule on the density: a reference computed
    another way than the binomial identity the module uses."""
    log_norm = math.lgamma(alpha + beta) - math.lgamma(alpha) - math.lgamma(beta)
    h = 0.5 / steps

    def f(x: float) -> float:
        return math.exp(log_norm) * x ** (alpha - 1) * (1 - x) ** (beta - 1)

    s = f(0.5) + f(1.0) + sum((4 if i % 2 else 2) * f(0.5 + i * h) for i in range(1, steps))
    return s * h / 3


def test_the_leader_probability_is_the_beta_posterior_computed_exactly():
    # By hand: a unanimous round of k is 1 - 2^-(k+1); no votes at all is a coin toss.
    assert leader_probability(0, 0) == 0.5
    assert leader_probability(3, 0) == 1 - 1 / 16
    assert leader_probability(4, 0) == 1 - 1 / 32
    # 5 against 2: P(Binomial(8, 1/2) <= 5) = (1 + 8 + 28 + 56 + 70 + 56) / 256.
    assert leader_probability(5, 2) == 219 / 256
    assert leader_probability(2, 2) == 0.5
    for a, b in [(1, 0), (3, 1), (6, 3), (9, 7), (12, 2), (20, 15)]:
        assert leader_probability(a, b) == pytest.approx(_beta_sf_half(a + 1, b + 1), abs=1e-9)
    with pytest.raises(ValueError):
        leader_probability(-1, 0)


@pytest.mark.parametrize(
    "text,how,expected",
    [
        ("The answer is 1,200.50.", "auto", "1200.5"),
        ("23 + 45 = 68", "auto", "68"),
        ("-3", "number", "-3"),
        ("4.0", "number", "4"),
        ("no digits here", "number", None),
        ("  Paris. ", "auto", "paris"),
        ('"PARIS!"', "text", "paris"),
        ("a   b\nc", "text", "a b c"),
        ("", "auto", None),
        (None, "auto", None),
        (42, "auto", None),
    ],
)
def test_answers_are_extracted_and_normalised(text, how, expected):
    assert extract(text, how) == expected


def test_the_vote_stops_when_confident_decided_or_out_of_budget():
    spec = VoteSpec(max_samples=16, confidence=0.95, first_round=4, round_size=2)
    t = Tally()
    for _ in range(3):
        t.add("7")
    assert should_stop(t, spec, 16) is None  # 0.9375 < 0.95
    t.add("7")
    assert should_stop(t, spec, 16) == "confident"  # 0.96875
    # Decided: 5 to 1 with 3 samples left, the runner-up cannot catch up.
    d = Tally()
    for a in ["1"] * 5 + ["2"]:
        d.add(a)
    assert should_stop(d, VoteSpec(max_samples=9, confidence=0.999), 9) == "decided"
    # Out of budget, even when split.
    s = Tally()
    for a in ["1", "2", "3", "4"]:
        s.add(a)
    assert should_stop(s, spec, 4) == "budget"
    # Abstentions are spent but vote for nothing.
    a = Tally()
    a.add(None)
    assert (a.spent, a.abstained, a.top()) == (1, 1, (None, 0, 0))
    # Rounds: the first round, then round_size, never past the budget.
    assert [round_size(spec, s, 5) for s in (0, 4, 5)] == [4, 1, 0]


def test_run_stops_early_on_agreement_and_uses_the_budget_on_disagreement():
    spec = VoteSpec(max_samples=16, confidence=0.95, first_round=4, round_size=2)
    tally, why = run(spec, 16, lambda k: ["42"] * k)
    assert (tally.spent, why, tally.top()[0]) == (4, "confident", "42")
    answers = iter(str(i % 5) for i in range(100))
    tally, why = run(spec, 16, lambda k: [next(answers) for _ in range(k)])
    assert (tally.spent, why) == (16, "budget")
    # A tenant's smaller budget is the budget.
    answers = iter(str(i % 5) for i in range(100))
    tally, why = run(spec, 6, lambda k: [next(answers) for _ in range(k)])
    assert (tally.spent, why) == (6, "budget")


@pytest.mark.parametrize(
    "opts,param",
    [
        ({"max_samples": 0}, "governor.vote.max_samples"),
        ({"max_samples": MAX_SAMPLES_CAP + 1}, "governor.vote.max_samples"),
        ({"max_samples": "8"}, "governor.vote.max_samples"),
        ({"max_samples": True}, "governor.vote.max_samples"),
        ({"confidence": 0.5}, "governor.vote.confidence"),
        ({"confidence": 1}, "governor.vote.confidence"),
        ({"confidence": 1.5}, "governor.vote.confidence"),
        ({"confidence": "high"}, "governor.vote.confidence"),
        ({"first_round": 0}, "governor.vote.first_round"),
        ({"max_samples": 4, "round_size": 5}, "governor.vote.round_size"),
        ({"extract": "regex"}, "governor.vote.extract"),
        ({"samples": 3}, "governor.vote.samples"),
        ([], "governor.vote"),
    ],
)
def test_bad_vote_options_are_refused_naming_the_field(opts, param):
    with pytest.raises(VoteError) as exc:
        parse_spec(opts)
    assert exc.value.param == param and exc.value.message


# ------------------------------------------------------------------ through the gateway


class VotingEngine(FakeEngine):
    """Answers each sample with the next of ``contents`` (cycling), ``TOKENS`` completion tokens
    each; with ``supports_n`` false, refuses n > 1 as the simulated engine does."""

    TOKENS = 3

    def __init__(self, contents: list[str], *, supports_n: bool = True) -> None:
        super().__init__()
        self.contents = contents
        self.supports_n = supports_n
        self.drawn = 0

    def _answer(self, req: dict) -> bytes:
        n = int(req.get("n") or 1)
        if n > 1 and not self.supports_n:
            err = {
                "error": {"message": "only n=1 is supported", "type": "invalid_request_error", "param": "n"}
            }
            return _response(400, b"application/json", orjson.dumps(err))
        choices = []
        for i in range(n):
            text = self.contents[self.drawn % len(self.contents)]
            self.drawn += 1
            choices.append(
                {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            )
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": self.TOKENS * n,
            "total_tokens": PROMPT_TOKENS + self.TOKENS * n,
        }
        data = {
            "id": "c1",
            "object": "chat.completion",
            "model": req.get("model"),
            "choices": choices,
            "usage": usage,
        }
        return _response(200, b"application/json", orjson.dumps(data))


PRICE = (1000, 2000)


async def _serve(inproc, contents, *, voting="field", supports_n=True, tenant=None):
    eng = VotingEngine(contents, supports_n=supports_n)
    await eng.start()
    await inproc.engine_b.stop()
    inproc.engine_b = eng  # stopped with the harness
    routes = {"m": {"targets": [target(1, eng.url)], "voting": voting}}
    prices = {"m": {"price_id": 3, "input_nanos": PRICE[0], "output_nanos": PRICE[1]}}
    inproc.gw.snapshots.current = snapshot(routes=routes, prices=prices, tenant=tenant)
    vote_forward.NO_N.discard(eng.url)
    return eng


def _vote(**opts) -> dict:
    return {"governor": {"vote": opts}}


async def test_a_vote_whose_samples_agree_stops_after_the_first_round(inproc):
    eng = await _serve(inproc, ["The answer is 42."], tenant={"budget": tenant_budget(cap=10**12)})
    a = await inproc.post(chat(max_tokens=5, **_vote(max_samples=16, confidence=0.95, first_round=4)))
    assert a.status == 200, a.body
    body = a.json()
    assert [c["message"]["content"] for c in body["choices"]] == ["The answer is 42."]
    vote = body["governor"]["vote"]
    assert (vote["answer"], vote["samples"], vote["budget"], vote["saved"], vote["stopped"]) == (
        "42",
        4,
        16,
        12,
        "confident",
    )
    assert vote["share"] == 1.0 and vote["leader_probability"] == pytest.approx(1 - 1 / 32, abs=1e-4)
    assert a.headers["x-governor-samples"] == "4/16" and a.headers["x-governor-samples-saved"] == "12"
    # One request to the engine, n=4, and no Governor field forwarded.
    assert len(eng.requests) == 1
    path, sent = eng.requests[0]
    assert sent["n"] == 4 and "governor" not in sent and sent["model"] == "eng-m"
    # Usage sums every sample; the event says what was spent and saved; nothing stays held.
    assert body["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": 4 * VotingEngine.TOKENS,
        "total_tokens": PROMPT_TOKENS + 4 * VotingEngine.TOKENS,
    }
    (ev,) = inproc.events()
    assert (ev["vote_samples"], ev["vote_samples_saved"], ev["status"]) == (4, 12, "ok")
    cost = PROMPT_TOKENS * PRICE[0] + 4 * VotingEngine.TOKENS * PRICE[1]
    assert ev["cost_nanos"] == cost
    assert await inproc.budget() == {"spent": cost, "held": 0}


async def test_a_split_vote_goes_to_its_budget_and_answers_the_plurality(inproc):
    # 7, 8, 9, 7, 8, 9, 7, 8: never confident, never decided; 7 and 8 tie, and 7 came first.
    eng = await _serve(inproc, ["7", "8", "9"])
    a = await inproc.post(chat(**_vote(max_samples=8, first_round=4, round_size=2)))
    assert a.status == 200, a.body
    vote = a.json()["governor"]["vote"]
    assert (vote["samples"], vote["budget"], vote["saved"], vote["stopped"], vote["answer"]) == (
        8,
        8,
        0,
        "budget",
        "7",
    )
    assert vote["votes"] == {"7": 3, "8": 3, "9": 2} and vote["rounds"] == 3
    assert vote["share"] == 3 / 8
    assert [r[1]["n"] for r in eng.requests] == [4, 2, 2]
    assert a.json()["usage"]["prompt_tokens"] == 3 * PROMPT_TOKENS  # each round counts the prompt
    (ev,) = inproc.events()
    assert (ev["vote_samples"], ev["vote_samples_saved"]) == (8, 0)


async def test_an_engine_that_refuses_n_gets_parallel_single_requests(inproc):
    eng = await _serve(inproc, ["5"], supports_n=False)
    a = await inproc.post(chat(**_vote(max_samples=10, first_round=4)))
    assert a.status == 200, a.body
    assert a.json()["governor"]["vote"]["samples"] == 4
    ns = [r[1]["n"] for r in eng.requests]
    assert ns == [4, 1, 1, 1, 1]  # refused once, then one sample per request
    assert a.json()["usage"]["prompt_tokens"] == 4 * PROMPT_TOKENS
    (ev,) = inproc.events()
    assert ev["prompt_tokens"] == 4 * PROMPT_TOKENS and ev["vote_samples"] == 4


async def test_the_tenants_monthly_samples_cap_a_vote_and_then_refuse_the_next(inproc):
    eng = await _serve(
        inproc, ["1", "2", "3"], tenant={"vote": {"samples_per_month": 6, "period_key": "", "spent": 0}}
    )
    a = await inproc.post(chat(**_vote(max_samples=16)))
    assert a.status == 200, a.body
    vote = a.json()["governor"]["vote"]
    assert (vote["samples"], vote["budget"], vote["max_samples"], vote["stopped"]) == (6, 6, 16, "budget")
    assert a.headers["x-governor-samples"] == "6/6"
    assert eng.drawn == 6
    b = await inproc.post(chat(**_vote(max_samples=4)))
    assert b.status == 429, b.body
    err = b.json()["error"]
    assert err["code"] == "vote_budget_exceeded" and "6 used of 6" in err["message"]
    assert eng.drawn == 6  # nothing more was sampled
    events = inproc.events()
    assert [(e["status"], e["vote_samples"], e["cost_nanos"] > 0) for e in events] == [
        ("ok", 6, True),
        ("error", 0, False),
    ]
    assert events[1]["error_type"] == "vote_budget_exceeded"
    assert await inproc.budget() == {} or (await inproc.budget())["held"] == 0
    # An ordinary request is still served.
    c = await inproc.post(chat())
    assert c.status == 200 and "governor" not in c.json()


async def test_a_vote_seeded_from_postgres_knows_what_the_month_already_spent(inproc):
    from snapshot.contract import period_key

    pkey = period_key("monthly", __import__("time").time())[0]
    await _serve(
        inproc, ["1", "2"], tenant={"vote": {"samples_per_month": 10, "period_key": pkey, "spent": 7}}
    )
    a = await inproc.post(chat(**_vote(max_samples=8)))
    assert a.status == 200 and a.json()["governor"]["vote"]["budget"] == 3


async def test_n_is_a_vote_only_where_the_route_says_so(inproc):
    eng = await _serve(inproc, ["x = 3"], voting="n")
    a = await inproc.post(chat(n=8))
    assert a.status == 200, a.body
    assert len(a.json()["choices"]) == 1 and a.json()["governor"]["vote"]["budget"] == 8
    assert a.json()["governor"]["vote"]["samples"] == 4
    eng2 = await _serve(inproc, ["x = 3"], voting="field")
    b = await inproc.post(chat(n=3))
    assert b.status == 200 and len(b.json()["choices"]) == 3 and "governor" not in b.json()
    assert eng2.requests[0][1]["n"] == 3
    assert eng.requests[0][1]["n"] == 4


async def test_a_vote_is_held_for_its_whole_budget(inproc):
    # Room for an ordinary request's worst case, not for 16 samples of it.
    prompt_bound_cost = 400 * PRICE[0]  # well above this small body's prompt bound
    one = prompt_bound_cost + 16 * PRICE[1]
    await _serve(inproc, ["1"], tenant={"budget": tenant_budget(cap=4 * one)})
    ordinary = await inproc.post(chat(max_tokens=16))
    assert ordinary.status == 200, ordinary.body
    a = await inproc.post(chat(max_tokens=16, **_vote(max_samples=16)))
    assert a.status == 429 and a.json()["error"]["code"] == "worst_case_over_budget"
    b = await inproc.post(chat(max_tokens=16, **_vote(max_samples=2, first_round=2)))
    assert b.status == 200, b.body


@pytest.mark.parametrize(
    "body,voting,code,param",
    [
        (chat(**_vote(max_samples=0)), "field", "invalid_value", "governor.vote.max_samples"),
        (chat(**_vote(max_samples=1000)), "field", "invalid_value", "governor.vote.max_samples"),
        (chat(**_vote(confidence=1.0)), "field", "invalid_value", "governor.vote.confidence"),
        (chat(**_vote(confidence=0.2)), "field", "invalid_value", "governor.vote.confidence"),
        (chat(**_vote(max_samples=4)), "off", "voting_not_enabled", "governor.vote"),
        (chat(n=4), "off", None, None),  # not a vote: n passes through
        (chat(stream=True, **_vote()), "field", "vote_stream_unsupported", "governor.vote"),
        (chat(n=2, **_vote()), "field", "invalid_value", "n"),
        (chat(governor=[1]), "field", "invalid_type", "governor"),
        (chat(governor={"cache": True}), "field", "invalid_value", "governor"),
    ],
)
async def test_bad_votes_are_refused_with_a_clear_400_and_nothing_held(inproc, body, voting, code, param):
    eng = await _serve(inproc, ["1"], voting=voting, tenant={"budget": tenant_budget(cap=10**12)})
    a = await inproc.post(body)
    if code is None:
        # Not a vote: the engine's four choices come back as they are.
        assert a.status == 200 and len(a.json()["choices"]) == 4 and "governor" not in a.json()
        return
    assert a.status == 400, a.body
    err = a.json()["error"]
    assert (err["code"], err["param"], err["type"]) == (code, param, "invalid_request_error")
    assert err["message"]
    assert eng.requests == [] and inproc.events() == [] and await inproc.budget() == {}


async def test_a_vote_on_another_endpoint_is_refused(inproc):
    await _serve(inproc, ["1"])
    a = await inproc.post({"model": "m", "prompt": "hi", **_vote()}, path="/v1/completions")
    assert a.status == 400 and a.json()["error"]["code"] == "vote_unsupported_endpoint"


async def test_an_engine_error_before_any_sample_is_passed_on_at_no_cost(inproc):
    eng = await _serve(inproc, ["1"])
    eng.fail_status = 500
    eng._answer = lambda req: FakeEngine._answer(eng, req)
    a = await inproc.post(chat(**_vote(max_samples=4)))
    assert a.status == 500
    (ev,) = inproc.events()
    assert (ev["status"], ev["cost_nanos"], ev["vote_samples"]) == ("error", 0, 0)


governor_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-5, 100), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=8,
)
vote_opts = st.fixed_dictionaries(
    {},
    optional={
        "max_samples": st.one_of(st.integers(-2, 70), governor_values),
        "confidence": st.one_of(st.floats(0, 1.2, allow_nan=False), governor_values),
        "first_round": st.one_of(st.integers(-1, 70), governor_values),
        "round_size": st.one_of(st.integers(-1, 70), governor_values),
        "extract": st.one_of(st.sampled_from(["auto", "number", "text", "x"]), governor_values),
    },
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gov=st.one_of(st.fixed_dictionaries({"vote": st.one_of(vote_opts, governor_values)}), governor_values),
    n=st.one_of(st.none(), st.integers(-1, 20), governor_values),
    stream=st.booleans(),
)
async def test_generated_votes_never_get_a_5xx(inproc, gov, n, stream):
    await _serve(inproc, ["3", "4"], voting="n")
    body = chat(max_tokens=4, stream=stream, governor=gov)
    if n is not None:
        body["n"] = n
    a = await inproc.post(body)
    assert a.status < 500, a.body
    if a.status >= 400:
        assert a.json()["error"]["message"]


async def test_the_official_client_sends_a_vote_and_reads_its_answer(inproc):
    """The openai SDK (over httpx's ASGI transport, into the same app): ``extra_body`` carries the
    field, the answer parses as a ChatCompletion, and the vote and headers come with it."""
    import httpx
    import openai

    from tests.gateway.inproc import SECRET

    await _serve(inproc, ["It is 68.", "68", "68!", "sixty-eight: 68"])
    client = openai.AsyncOpenAI(
        api_key=SECRET,
        base_url="http://gateway/v1",
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=inproc.gw)),
        max_retries=0,
    )
    raw = await client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What is 23 + 45?"}],
        extra_body={"governor": {"vote": {"max_samples": 12}}},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "It is 68."
    assert completion.usage.completion_tokens == 4 * VotingEngine.TOKENS
    assert completion.model_extra["governor"]["vote"]["answer"] == "68"
    assert raw.headers["x-governor-samples"] == "4/12"
    await client.close()
