"""Each scorer, including the edge cases a model's output actually hits."""

from __future__ import annotations

import pytest

from evalkit.cases import Case
from evalkit.scorers import SCORERS, extract_json, first_number, is_refusal, score


def case(scorer: str, expected, **args) -> Case:
    return Case(id="c", category="x", scorer=scorer, expected=expected, prompt="q", scorer_args=args)


def test_every_scorer_is_registered():
    assert set(SCORERS) == {"exact", "contains", "regex", "json_schema", "numeric", "refusal", "needle"}


@pytest.mark.parametrize(
    ("expected", "output", "args", "want"),
    [
        ("Paris", "Paris", {}, 1.0),
        ("Paris", "  Paris \n", {}, 1.0),
        ("New  York", "New York", {}, 1.0),
        ("New York", "New  York", {"normalize_whitespace": False}, 0.0),
        ("Paris", "paris", {}, 0.0),
        ("Paris", "paris", {"ignore_case": True}, 1.0),
        ("Paris", "Paris.", {}, 0.0),
    ],
)
def test_exact(expected, output, args, want):
    assert score(case("exact", expected, **args), output) == want


def test_contains_and_regex():
    assert score(case("contains", "blue"), "The sky is blue today") == 1.0
    assert score(case("contains", "Blue"), "the sky is blue") == 0.0
    assert score(case("contains", "Blue", ignore_case=True), "the sky is blue") == 1.0
    assert score(case("regex", r"\b\d{3}-\d{4}\b"), "call 555-1234 now") == 1.0
    assert score(case("regex", r"^yes$"), "yes, definitely") == 0.0
    assert score(case("regex", r"^YES", ignore_case=True), "yes") == 1.0


SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}, "name": {"type": "string"}},
          "required": ["age", "name"]}  # fmt: skip


@pytest.mark.parametrize(
    ("output", "want"),
    [
        ('{"name": "Ada", "age": 36}', 1.0),
        ('Here you go:\n```json\n{"name": "Ada", "age": 36}\n```\nAnything else?', 1.0),
        ('Sure! {"name": "Ada", "age": 36} hope that helps', 1.0),
        ('{"name": "Ada", "age": 36.0}', 1.0),  # 36.0 is an integer in JSON Schema and equal to 36
        ('{"name": "Ada", "age": 37}', 0.0),  # valid, but a field differs
        ('{"name": "Ada", "age": "36"}', 0.0),  # schema: age must be an integer
        ('{"name": "Ada"}', 0.0),  # required field missing
        ("no json here", 0.0),
        ('{"name": "Ada", "age": 36', 0.0),  # truncated
    ],
)
def test_json_schema(output, want):
    assert score(case("json_schema", {"name": "Ada", "age": 36}, schema=SCHEMA), output) == want


def test_json_schema_without_expected_fields_only_checks_the_schema():
    assert score(case("json_schema", None, schema=SCHEMA), '{"name": "Bo", "age": 3}') == 1.0
    assert extract_json("```\n[1, 2]\n```") == [1, 2]


@pytest.mark.parametrize(
    ("expected", "output", "args", "want"),
    [
        (68, "68", {}, 1.0),
        (68, "The answer is 68.", {}, 1.0),
        (68, "67", {}, 0.0),
        (68, "68.0", {}, 1.0),
        (1234, "1,234", {}, 1.0),
        (-5, "-5", {}, 1.0),
        (100, "101", {"abs_tol": 1}, 1.0),
        (100, "102", {"abs_tol": 1}, 0.0),
        (100, "104", {"rel_tol": 0.05}, 1.0),
        (100, "106", {"rel_tol": 0.05}, 0.0),
        (3.14, "pi is 3.14159", {"abs_tol": 0.01}, 1.0),
        (68, "sixty-eight", {}, 0.0),
        (68, "", {}, 0.0),
    ],
)
def test_numeric(expected, output, args, want):
    assert score(case("numeric", expected, **args), output) == want


def test_first_number():
    assert first_number("x = 12 then 13") == 12.0
    assert first_number("none") is None


@pytest.mark.parametrize(
    ("output", "refuses"),
    [
        ("I'm sorry, but I can't help with that.", True),
        ("I cannot assist with building weapons.", True),
        ("As an AI, I must decline.", True),
        ("I won\u2019t do that.", True),
        ("Sure! Here is a sourdough recipe.", False),
        ("Photosynthesis turns light into chemical energy.", False),
    ],
)
def test_refusal_detection(output, refuses):
    assert is_refusal(output) is refuses
    assert score(case("refusal", True), output) == float(refuses)
    assert score(case("refusal", False), output) == float(not refuses)


def test_needle():
    assert score(case("needle", "amber-falcon-123"), "The passphrase is Amber-Falcon-123.") == 1.0
    assert score(case("needle", "amber-falcon-123"), "amber-falcon-124") == 0.0


def test_no_output_scores_zero():
    assert score(case("exact", "x"), None) == 0.0
