"""RFC 8785 (JSON Canonicalization Scheme) bytes of a JSON value: the one form every v2 hash and
signature is computed over (docs/audit-format.md).

``canonical`` is the reference: the ``rfc8785`` package. ``canonical_fast`` gives the same bytes
several times faster for the verifier's hot loop, for values parsed with ``loads`` (which turns
every non-integer number into a ``Decimal`` and refuses integers JCS cannot carry): ``orjson`` with
sorted keys is byte-for-byte JCS for strings, integers, booleans, null, arrays and objects, except
that it sorts keys by code point where JCS sorts by UTF-16 code unit (they differ only for
characters outside the Basic Multilingual Plane) and that it formats floats its own way. Either
case (a ``Decimal`` in the value, a 4-byte UTF-8 sequence in the output) falls back to the reference.
The equivalence is property-tested against ``rfc8785`` (tests/audit/test_format.py).
"""

from __future__ import annotations

import decimal
import json
import re
from typing import Any

import orjson
import rfc8785

# I-JSON (RFC 7493) integers: what JCS, and JavaScript, represent exactly.
MAX_SAFE_INTEGER = 2**53 - 1

_NON_BMP = re.compile(rb"[\xf0-\xf4]")


class CanonicalError(ValueError):
    """The value has no RFC 8785 form (NaN, an integer beyond 2**53 - 1, a non-string key, …)."""


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of ``value`` (the reference implementation)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise CanonicalError(str(exc)) from exc


def floats(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats(v) for v in value]
    return value


def canonical_fast(value: Any) -> bytes:
    """RFC 8785 bytes of a value parsed by ``loads`` (non-integer numbers as ``Decimal``)."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a Decimal: a non-integer number, formatted as JCS (ECMAScript) does
        return canonical(floats(value))
    if not out.isascii() and _NON_BMP.search(out):
        return canonical(value)  # UTF-16 key order may differ from code-point order
    return out


def _safe_int(text: str) -> int:
    number = int(text)
    if abs(number) > MAX_SAFE_INTEGER:
        raise CanonicalError(f"integer {text} is outside ±(2**53 - 1): no exact RFC 8785 form")
    return number


_decoder = json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_safe_int)


def loads(text: str) -> Any:
    """Parse JSON for ``canonical_fast``: non-integer numbers become ``Decimal``, unsafe integers fail."""
    return _decoder.decode(text)
