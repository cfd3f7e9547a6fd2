"""RFC 8785 (JSON Canonicalization Scheme) bytes of a JSON value: the one form every v2 hash and
signature is computed over (docs/audit-format.md).

``canonical`` is the reference: the ``rfc8785`` package. ``canonical_fast`` gives the same bytes
several times faster for the verifier's hot loop, for values parsed with ``loads`` (which turns
every non-integer number into a ``Decimal`` and refuses integers JCS cannot carry): ``orjson`` with
sorted keys is byte-for-byte JCS for strings, integers, booleans, null, arrays and objects, except
that it sorts keys by code point where JCS sorts by UTF-16 code unit (they differ only for
characters outside the Basic Multilingual Plane) and that it formats floats its own way. Either
non-integer numbers reach it as ``Decimal`` and are laid out by ``number`` (ECMAScript's rules), and
a 4-byte UTF-8 sequence in the output falls back to the reference.
The equivalence is property-tested against ``rfc8785`` (tests/audit/test_format.py).
"""

from __future__ import annotations

import decimal
import functools
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
    """``value`` with every ``Decimal`` (as ``loads`` makes them) back to a float."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats(v) for v in value]
    return value


def number(value: float) -> str:
    """ECMAScript's Number.prototype.toString of a finite double (RFC 8785 section 3.2.2.3).

    Python's ``repr`` gives the same shortest round-trip digits; only their layout differs.
    """
    if value != value or value in (float("inf"), float("-inf")):
        raise CanonicalError(f"{value!r} has no JSON form")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    text = repr(abs(value))
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    digits = (whole + frac).lstrip("0")
    # value = 0.d1d2…dk × 10**n
    n = (
        len(whole.lstrip("0")) + int(exp or 0)
        if whole.strip("0")
        else int(exp or 0) - (len(frac) - len(frac.lstrip("0")))
    )
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return sign + out


@functools.lru_cache(maxsize=8192)
def _decimal_fragment(value: decimal.Decimal) -> orjson.Fragment:
    return orjson.Fragment(number(float(value)))


def _fragment(value: Any) -> orjson.Fragment:
    if isinstance(value, decimal.Decimal):
        return _decimal_fragment(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def canonical_fast(value: Any) -> bytes:
    """RFC 8785 bytes of a value parsed by ``loads`` (non-integer numbers as ``Decimal``)."""
    try:
        # A Decimal (a non-integer number) is laid out as ECMAScript (and so RFC 8785) does.
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=_fragment)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CanonicalError(str(exc)) from exc
    if not out.isascii() and _NON_BMP.search(out):
        return canonical(floats(value))  # UTF-16 key order may differ from code-point order
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
