"""The compiled validator (jsonschema-rs) and jsonschema agree on what is valid.

``core.jsonschemas.schema_errors`` asks jsonschema-rs first and trusts a "valid"; only a refusal goes
to jsonschema for its messages. That is safe only while jsonschema-rs never accepts what jsonschema
refuses, so each of the product's schemas is tried here on documents one edit away from a valid one
(a value replaced by any JSON value, NaN, a tuple; a key dropped; an unknown key added), which is
where the two could disagree: bounds, types, conditionals, ``additionalProperties``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.jsonschemas import Validator, _compiled, schema_errors
from deployments.rollouts import schemas as rollout_schemas
from evaluations import schemas
from evaluations.constants import DEFAULT_SLA, DEFAULT_STAGE, DEFAULT_WORKLOAD
from evaluations.services.gates import DEFAULT_PERFORMANCE, DEFAULT_QUALITY, DEFAULT_STABILITY

SOAK = {"required": True, "duration_s": 60, "length_mix": [{"input": 8, "output": 8}],
        "waves": {"low_rps": 1, "high_rps": 2, "period_s": 10}}  # fmt: skip
PLAN = {
    "steps": [{"kind": "set_weight", "weight": 10}, {"kind": "analysis", "window_s": 30},
              {"kind": "pause", "seconds": None}, {"kind": "set_weight", "weight": 100}],
    "checks": [{"metric": "error_rate", "limit": 0.05, "relative": False, "min_samples": 5},
               {"metric": "ttft_p95_ms", "limit": 1.5, "relative": True}],
    "failure_limit": 1,
}  # fmt: skip
WORKLOAD = {
    "arrival": {"kind": "poisson", "rate": 2.0},
    "input": {"kind": "lognormal", "mean": 256, "sigma": 0.5},
    "output": {"kind": "fixed", "value": 64},
    "shared_prefix_ratio": 0.25,
}
EMPIRICAL = {
    "arrival": {"kind": "concurrency", "concurrency": 4},
    "empirical": [[12, 30], [400, 8], [64, 64]],
}
POLICY = {
    "quality": dict(DEFAULT_QUALITY),
    "performance": dict(DEFAULT_PERFORMANCE),
    "stability": {**DEFAULT_STABILITY, "soak": SOAK},
}

CASES = [
    (schemas.WORKLOAD, DEFAULT_WORKLOAD),
    (schemas.WORKLOAD, WORKLOAD),
    (schemas.WORKLOAD, EMPIRICAL),
    (schemas.SLA, DEFAULT_SLA),
    (schemas.STAGE, DEFAULT_STAGE),
    (schemas.GATE_POLICY, POLICY),
    (rollout_schemas.PLAN, PLAN),
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, -1, 0.5, 100, 100_000, 10**7, "serving", "", "x", "poisson", "fixed"])
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, here=()):
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*here, i))


def _edited(document, path, how, value):
    if not path:
        return value if how == "replace" else document
    head, *rest = path
    if isinstance(document, dict):
        out = dict(document)
        if not rest and how == "drop":
            out.pop(head)
        elif not rest and how == "add" and isinstance(out[head], dict):
            out[head] = {**out[head], "x_unknown": value}
        else:
            out[head] = _edited(document[head], tuple(rest), how, value)
        return out
    out = list(document)
    if not rest and how == "drop":
        out.pop(head)
    else:
        out[head] = _edited(document[head], tuple(rest), how, value)
    return out


def _verdicts(schema, document) -> tuple[bool | None, bool]:
    try:
        fast = _compiled(schema).is_valid(document)
    except (ValueError, TypeError, OverflowError):
        fast = None  # jsonschema-rs cannot read it; schema_errors asks jsonschema alone
    return fast, next(iter(Validator(schema).iter_errors(document)), None) is None


@pytest.mark.parametrize(("schema", "document"), CASES)
def test_the_seed_documents_are_valid_to_both(schema, document):
    assert _verdicts(schema, document) == (True, True)
    assert schema_errors(schema, document) == []


@pytest.mark.parametrize(("schema", "document"), CASES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_edit_away_both_validators_give_the_same_verdict(schema, document, data):
    path = data.draw(st.sampled_from(list(_paths(document))))
    how = data.draw(st.sampled_from(["replace", "drop", "add"]))
    edited = _edited(document, path, how, data.draw(json_values))
    fast, slow = _verdicts(schema, edited)
    assert fast in (None, slow), (edited, fast, slow)
    assert (schema_errors(schema, edited) == []) == slow


def test_nan_and_infinity_are_refused_by_both_roads():
    for bad in (math.nan, math.inf):
        document = {**DEFAULT_SLA, "ttft_ms": bad}
        assert _verdicts(schemas.SLA, document) == (False, False)
        assert [m for _, m in schema_errors(schemas.SLA, document)] == [
            "ttft_ms (ms): must be a number or empty"
        ]


def test_an_oversized_array_is_refused_for_its_size_alone_without_reading_its_items():
    """100,001 pairs that are each wrong give one message, not 100,001: the items are never read."""
    document = {**EMPIRICAL, "empirical": [["x", -1]] * (schemas.MAX_EMPIRICAL_PAIRS + 1)}
    assert [m for _, m in schema_errors(schemas.WORKLOAD, document)] == [
        "empirical ((input_len, output_len) pairs): takes at most 100,000 items"
    ]
    # Within the limit, every wrong item is still named.
    document = {**EMPIRICAL, "empirical": [[12, 30], ["x", 5]]}
    assert [m for _, m in schema_errors(schemas.WORKLOAD, document)] == [
        "empirical[1][0] (tokens): must be a whole number"
    ]


def test_a_tuple_is_a_list_on_both_roads():
    document = {**EMPIRICAL, "empirical": ((12, 30), (400, 8))}
    assert _verdicts(schemas.WORKLOAD, document) == (True, True)
