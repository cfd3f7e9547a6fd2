"""Parsing JSONL suites: every bad input is rejected with the line that is wrong."""

from __future__ import annotations

import json

import pytest

from evalkit.cases import Case
from evalkit.suites import SuiteError, dump_jsonl, parse_jsonl

GOOD = {"id": "a1", "category": "arithmetic", "prompt": "2+2=", "expected": 4, "scorer": "numeric"}


def line(**changes) -> str:
    obj = dict(GOOD) | changes
    return json.dumps({k: v for k, v in obj.items() if v is not ...})


def suite(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_parses_a_good_suite_and_round_trips():
    text = suite(
        line(),
        "",
        line(
            id="c1",
            category="chat",
            prompt=...,
            messages=[{"role": "user", "content": "hi"}],
            expected="hello",
            scorer="exact",
            scorer_args={"ignore_case": True},
            weight=2,
            max_tokens=5,
        ),  # fmt: skip
    )
    cases = parse_jsonl(text)
    assert [c.id for c in cases] == ["a1", "c1"]
    assert cases[1].messages == ({"role": "user", "content": "hi"},)
    assert cases[1].weight == 2.0 and cases[1].max_tokens == 5
    assert parse_jsonl(dump_jsonl(cases)) == cases
    assert parse_jsonl(text.encode()) == cases


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("{not json", "invalid JSON"),
        (line(id=...), "missing field 'id'"),
        (line(scorer=...), "missing field 'scorer'"),
        (line(expected=...), "missing field 'expected'"),
        (line(prompt=...), "exactly one of 'messages' or 'prompt'"),
        (line(messages=[{"role": "user"}]), "exactly one of"),
        (line(prompt=..., messages=[{"role": "user"}]), "messages[0]"),
        (line(scorer="bleu"), "unknown scorer 'bleu'"),
        (line(scorer="regex", expected="([a-z"), "not a valid regular expression"),
        (
            line(scorer="json_schema", expected=None, scorer_args={"schema": {"type": "nonsense"}}),
            "not a valid JSON Schema",
        ),  # fmt: skip
        (line(scorer="json_schema", expected=None), "needs scorer_args.schema"),
        (line(scorer_args={"abs_tol": -1}), "abs_tol must be a finite number >= 0"),
        (line(scorer_args={"rel_tol": "1%"}), "rel_tol must be a finite number >= 0"),
        (line(expected="four"), "'numeric' needs 'expected' to be a finite number"),
        (line(weight=0), "'weight' must be a number > 0"),
        (line(context_len=-5), "'context_len' must be a positive integer"),
        (line(colour="red"), "unknown field(s): colour"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_line_is_named(bad, fragment):
    with pytest.raises(SuiteError) as err:
        parse_jsonl(suite(line(id="ok1"), line(id="ok2"), bad))
    assert err.value.line == 3
    assert fragment in err.value.message
    assert str(err.value).startswith("line 3: ")


def test_duplicate_id_names_both_lines():
    with pytest.raises(SuiteError) as err:
        parse_jsonl(suite(line(id="x"), "", line(id="y"), line(id="x")))
    assert err.value.line == 4
    assert "duplicate id 'x' (first on line 1)" in err.value.message


def test_non_utf8_names_the_line():
    data = suite(line(id="x"), line(id="y")).encode() + b'{"id": "caf\xe9"}\n'
    with pytest.raises(SuiteError) as err:
        parse_jsonl(data)
    assert err.value.line == 3 and "not UTF-8" in err.value.message


@pytest.mark.parametrize("text", ["", "\n\n  \n", b""])
def test_empty_suite_is_an_error(text):
    with pytest.raises(SuiteError) as err:
        parse_jsonl(text)
    assert "empty" in err.value.message and err.value.line >= 1


def test_case_prompt_becomes_a_user_message():
    case = Case(id="p", category="c", scorer="exact", expected="x", prompt="hello")
    assert case.chat_messages() == [{"role": "user", "content": "hello"}]
