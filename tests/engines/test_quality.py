"""Simulated answer quality (engines.quality): deterministic, right at the profile's rate, and
wrong answers that the case's own scorer marks wrong."""

from __future__ import annotations

import pytest

from engines.quality import QualityProfile, answer, answer_tokens, draw, right_answer
from evalkit.builtin import BUILTIN_SUITES, generate
from evalkit.runner import truth_of
from evalkit.scorers import score

PROFILE = QualityProfile.from_dict(
    {
        "categories": {"arithmetic": 0.9, "refusal": 0.5},
        "by_context": {"1024": 0.95, "4096": 0.9, "16384": 0.6},
        "default": 0.8,
    }  # fmt: skip
)


def test_probability_rules():
    assert PROFILE.p_correct(category="arithmetic") == 0.9
    assert PROFILE.p_correct(category="json_extraction") == 0.8  # default
    assert PROFILE.p_correct(category="needle", context_len=1000) == 0.95  # smallest bucket >= 1000
    assert PROFILE.p_correct(category="needle", context_len=4096) == 0.9
    assert PROFILE.p_correct(category="needle", context_len=5000) == 0.6
    assert PROFILE.p_correct(category="needle", context_len=100_000) == 0.6  # beyond the largest bucket
    assert PROFILE.p_correct(category="arithmetic", context_len=16384) == 0.6  # the lower of the two


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"default": 1.5}, "default must be a number between 0 and 1"),
        ({"categories": {"a": "high"}}, "categories[a]"),
        ({"by_context": {"long": 0.5}}, "must be a token count"),
        ({"by_context": {"0": 0.5}}, "must be > 0"),
        ({"colour": 1}, "unknown quality profile key"),
        ([0.5], "must be an object"),
    ],
)
def test_bad_profiles_are_rejected(bad, fragment):
    with pytest.raises(ValueError, match=None) as err:
        QualityProfile.from_dict(bad)
    assert fragment in str(err.value)


def test_draw_is_deterministic_and_depends_on_seed_case_and_prompt():
    a = draw(seed=1, case_id="c1", prompt_text="p")
    assert a == draw(seed=1, case_id="c1", prompt_text="p")
    assert 0 <= a < 1
    assert a != draw(seed=2, case_id="c1", prompt_text="p")
    assert a != draw(seed=1, case_id="c2", prompt_text="p")
    assert a != draw(seed=1, case_id="c1", prompt_text="q")


@pytest.mark.parametrize("suite", sorted(BUILTIN_SUITES))
def test_right_answers_score_1_and_wrong_answers_score_0(suite):
    cases = generate(suite, seed=3, n=60 if not suite.startswith("needle") else 12)
    always = QualityProfile.from_dict({"default": 1.0})
    never = QualityProfile.from_dict({"default": 0.0})
    for case in cases:
        truth = truth_of(case)
        right, ok = answer(always, truth, seed=0, prompt_text=case.prompt_text())
        assert ok and score(case, right) == 1.0, (case.id, right)
        wrong, ok = answer(never, truth, seed=0, prompt_text=case.prompt_text())
        assert not ok and score(case, wrong) == 0.0, (case.id, wrong)
        assert right_answer(truth) == right


def test_share_right_converges_on_the_profile():
    cases = generate("arithmetic", seed=11, n=2000)
    right = [answer(PROFILE, truth_of(c), seed=0, prompt_text=c.prompt_text())[1] for c in cases]
    assert abs(sum(right) / len(right) - 0.9) < 0.03  # binomial sd at n=2000 is 0.0067
    again = [answer(PROFILE, truth_of(c), seed=0, prompt_text=c.prompt_text())[1] for c in cases]
    assert again == right


def test_wrong_numbers_are_off_by_more_than_the_tolerance():
    case = generate("arithmetic", seed=1, n=1)[0]
    truth = truth_of(case) | {"scorer_args": {"abs_tol": 2}}
    never = QualityProfile.from_dict({"default": 0.0})
    text, _ = answer(never, truth, seed=0, prompt_text="x")
    assert abs(float(text) - case.expected) == 3


def test_malformed_truth_is_a_value_error():
    with pytest.raises(ValueError, match="governor_eval"):
        answer(PROFILE, {"category": "x"}, seed=0, prompt_text="")
    with pytest.raises(ValueError, match="context_len"):
        answer(PROFILE, {"scorer": "exact", "expected": "x", "context_len": "long"}, seed=0, prompt_text="")


def test_answer_tokens_are_words_and_respect_max_tokens():
    assert answer_tokens("The answer is 68.", max_tokens=16, room=100) == (
        ["The", " answer", " is", " 68."],
        "stop",
    )
    assert answer_tokens("The answer is 68.", max_tokens=2, room=100) == (["The", " answer"], "length")
    assert answer_tokens("a b c", max_tokens=None, room=2) == (["a", " b"], "length")
