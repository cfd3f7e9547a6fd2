"""Suites as JSON Lines: one case per line; blank lines are ignored.

Fields of a line: ``id`` (non-empty string, unique in the file), ``category`` (non-empty string),
exactly one of ``messages`` (non-empty list of ``{"role", "content"}`` strings) or ``prompt``
(non-empty string), ``expected``, ``scorer`` (a name in ``evalkit.scorers.SCORERS``), and the
optional ``scorer_args`` (object), ``weight`` (number > 0, default 1), ``context_len`` (integer
> 0) and ``max_tokens`` (integer > 0, default 64). Unknown fields are an error, so a typo does not
silently fall back to a default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from evalkit.cases import DEFAULT_MAX_TOKENS, Case
from evalkit.scorers import ScorerError, check

KNOWN_FIELDS = frozenset(
    {"id", "category", "messages", "prompt", "expected", "scorer", "scorer_args", "weight", "context_len",
     "max_tokens"}
)  # fmt: skip


class SuiteError(ValueError):
    """A suite file that cannot be used; ``line`` is 1-based (0 for the file as a whole)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


def _positive_int(obj: dict, name: str, default: int | None) -> int | None:
    value = obj.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"'{name}' must be a positive integer, got {value!r}")
    return value


def case_from_dict(obj: Any) -> Case:
    """Validate one parsed line; raises ``ValueError`` with a message naming the field."""
    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    unknown = sorted(set(obj) - KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    for name in ("id", "category", "scorer"):
        if name not in obj:
            raise ValueError(f"missing field '{name}'")
        if not isinstance(obj[name], str) or not obj[name].strip():
            raise ValueError(f"'{name}' must be a non-empty string")
    if "expected" not in obj:
        raise ValueError("missing field 'expected' (use null when the scorer needs none)")
    has_messages, has_prompt = "messages" in obj, "prompt" in obj
    if has_messages == has_prompt:
        raise ValueError("exactly one of 'messages' or 'prompt' is required")
    messages = None
    prompt = None
    if has_messages:
        raw = obj["messages"]
        if not isinstance(raw, list) or not raw:
            raise ValueError("'messages' must be a non-empty list")
        for i, m in enumerate(raw):
            if (
                not isinstance(m, dict)
                or set(m) != {"role", "content"}
                or not isinstance(m["role"], str)
                or not isinstance(m["content"], str)
            ):
                raise ValueError(f"messages[{i}] must be an object with string 'role' and 'content' only")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in raw)
    else:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("'prompt' must be a non-empty string")
    scorer_args = obj.get("scorer_args") or {}
    if not isinstance(scorer_args, dict):
        raise ValueError("'scorer_args' must be an object")
    weight = obj.get("weight", 1.0)
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or weight <= 0
    ):
        raise ValueError(f"'weight' must be a number > 0, got {weight!r}")
    check(obj["scorer"], obj["expected"], scorer_args)
    return Case(
        id=obj["id"],
        category=obj["category"],
        scorer=obj["scorer"],
        expected=obj["expected"],
        messages=messages,
        prompt=prompt,
        scorer_args=scorer_args,
        weight=float(weight),
        context_len=_positive_int(obj, "context_len", None),
        max_tokens=_positive_int(obj, "max_tokens", DEFAULT_MAX_TOKENS),  # type: ignore[arg-type]
    )


def parse_jsonl(text: str | bytes) -> list[Case]:
    """Parse a JSONL suite. Raises ``SuiteError(line, message)`` on the first bad line.

    Checked: UTF-8 (for bytes), JSON syntax, required fields and types, known scorer, scorer
    arguments (regex compiles, schema is a valid JSON Schema, tolerances are finite and >= 0),
    unique ids, and at least one case.
    """
    if isinstance(text, bytes | bytearray):
        raw_lines = bytes(text).split(b"\n")
        lines = []
        for n, raw in enumerate(raw_lines, start=1):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise SuiteError(n, f"not UTF-8 (byte {exc.start + 1} of the line)") from exc
        if lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
    else:
        lines = text.split("\n")
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise SuiteError(n, f"invalid JSON: {exc}") from exc
        try:
            case = case_from_dict(obj)
        except (ValueError, ScorerError) as exc:
            raise SuiteError(n, str(exc)) from exc
        if case.id in seen:
            raise SuiteError(n, f"duplicate id {case.id!r} (first on line {seen[case.id]})")
        seen[case.id] = n
        cases.append(case)
    if not cases:
        raise SuiteError(max(1, len(lines)), "the suite is empty: no cases")
    return cases


def dump_jsonl(cases: Iterable[Case]) -> str:
    """The JSONL text of ``cases`` (``parse_jsonl(dump_jsonl(cases)) == cases``)."""
    return "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in cases)
