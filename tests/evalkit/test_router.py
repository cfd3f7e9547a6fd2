"""evalkit.router: features, the logistic fit against known optima, the split, the curve and the
operating point, and the gate's verdict on intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit import builtin, router
from evalkit.router import Labelled, RouterError, RouterModel


def test_features_count_what_the_request_asks_and_read_chat_parts():
    easy = router.features("What is 3 + 4?")
    hard = router.features("What is (47 + 85) * 6?")
    names = router.FEATURES
    f = dict(zip(names, easy, strict=True))
    g = dict(zip(names, hard, strict=True))
    assert (f["numbers"], f["digits"], f["max_number_digits"], f["plus"], f["times"]) == (2, 2, 1, 1, 0)
    assert (g["numbers"], g["digits"], g["max_number_digits"], g["times"], g["brackets"]) == (3, 5, 2, 1, 1)
    assert router.features("What is 80 - 12?")[names.index("minus")] == 1
    # Chat contents as a string or as parts; an image part adds no text.
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 3 + 4?"}, {"type": "image_url"}]},
    ]
    assert router.request_text(msgs) == "Be brief.\nWhat is 3 + 4?"
    assert router.request_text(None, "2 + 2") == "2 + 2"


def test_fit_without_penalty_finds_the_saturated_optimum():
    # One binary feature: the maximum-likelihood probabilities are the two groups' shares.
    x = np.array([[0.0]] * 8 + [[1.0]] * 8)
    y = np.array([1, 0, 0, 0, 0, 0, 0, 0] + [1, 1, 1, 1, 1, 1, 0, 0], dtype=float)
    m = router.fit(x, y, l2=0.0, names=("x",))
    assert m.p_of([0.0]) == pytest.approx(1 / 8, abs=1e-6)
    assert m.p_of([1.0]) == pytest.approx(6 / 8, abs=1e-6)


def test_fit_with_a_penalty_zeroes_the_penalised_gradient():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 4)) * [1, 10, 0.1, 3] + [0, 5, 1, -2]
    true = np.array([1.5, -0.2, 4.0, 0.0])
    y = (rng.random(300) < 1 / (1 + np.exp(-(x @ true - 0.5)))).astype(float)
    m = router.fit(x, y, l2=2.0, names=("a", "b", "c", "d"))
    xs = np.hstack([np.ones((300, 1)), (x - m.mean) / m.scale])
    w = np.array([m.intercept, *m.coef])
    p = 1 / (1 + np.exp(-(xs @ w)))
    grad = xs.T @ (p - y) + 2.0 * np.r_[0.0, w[1:]]
    assert np.max(np.abs(grad)) < 1e-6
    # p_of in plain Python agrees with the matrix form.
    assert m.p_of(list(x[0])) == pytest.approx(p[0], rel=1e-9)


def test_a_model_round_trips_and_a_foreign_feature_spec_is_refused():
    m = router.fit(
        np.eye(len(router.FEATURES)).repeat(3, axis=0), np.tile([0.0, 1.0, 1.0], len(router.FEATURES))
    )
    again = RouterModel.from_dict(m.to_dict())
    assert again.p_cheap("What is 12 + 30?") == m.p_cheap("What is 12 + 30?")
    with pytest.raises(RouterError, match="features"):
        RouterModel.from_dict(m.to_dict() | {"features": ["x"]})
    with pytest.raises(RouterError, match="spec version"):
        RouterModel.from_dict(m.to_dict() | {"spec_version": 99})


def _cases(n: int) -> list[Labelled]:
    """The cheap version is right on sums, wrong on products; the strong one on both."""
    out = []
    for c in builtin.generate("arithmetic_graded", seed=5, n=n):
        text = router.request_text(c.chat_messages())
        hard = "*" in text
        out.append(Labelled(c.id, text, 0.0 if hard else 1.0, 1.0, 1.0, 10.0, c.category))
    return out


def test_split_is_by_case_id_and_stable():
    cases = _cases(400)
    a = router.split(cases, seed=1)
    b = router.split(list(reversed(cases)), seed=1)
    assert [sorted(c.case_id for c in part) for part in a] == [sorted(c.case_id for c in part) for part in b]
    assert sum(len(p) for p in a) == 400 and all(len(p) > 60 for p in a)
    assert router.split(cases, seed=2)[2] != a[2]


def test_training_routes_sums_cheap_and_products_strong_and_reports_on_test_cases():
    cases = _cases(600)
    t = router.train(cases, target=0.95, seed=0)
    test = {c.case_id: c for c in cases if c.case_id in set(t.test_case_ids)}
    assert t.met_target and t.counts["test"] == len(test)
    # Hand check of the test point: every sum to cheap (cost 1), every product to strong (cost 10).
    sums = sum(1 for c in test.values() if "*" not in c.text)
    assert t.test_point.cheap_share == pytest.approx(sums / len(test))
    assert t.test_point.quality == 1.0 and t.test_point.quality_ratio == 1.0
    assert t.test_point.cost_ratio == pytest.approx((sums * 1 + (len(test) - sums) * 10) / (10 * len(test)))
    # The curve runs from all-cheap to all-strong; its cost never falls as the threshold rises.
    curve = t.test_curve
    assert curve[0].cheap_share == 1.0 and curve[-1].cheap_share == 0.0 and curve[-1].cost_ratio == 1.0
    assert all(a.cost_ratio <= b.cost_ratio for a, b in zip(curve, curve[1:], strict=False))
    assert curve[0].quality == pytest.approx(sums / len(test))


def test_a_target_out_of_range_or_too_few_cases_is_refused():
    for bad in (0, -0.1, 1.01, True, "0.9", math.nan):
        with pytest.raises(RouterError, match=r"\(0, 1\]"):
            router.train(_cases(200), target=bad)
    with pytest.raises(RouterError, match="at least"):
        router.train(_cases(20), target=0.9)


def test_a_target_no_threshold_meets_sends_everything_to_the_strong_version():
    # The cheap version is never right: any traffic to it costs quality, so the router sends none.
    cases = [Labelled(c.case_id, c.text, 0.0, 1.0, 1.0, 10.0) for c in _cases(300)]
    t = router.train(cases, target=0.99)
    assert not t.met_target and t.threshold == router.ALL_STRONG
    assert t.test_point.cheap_share == 0.0 and t.test_point.cost_ratio == 1.0


def test_a_strong_version_that_is_rarely_right_still_leaves_an_operating_point():
    # 120 cases, the strong version right on 4 and the cheap one on none: most bootstrap resamples of
    # the validation quarter hold no right answer. All-strong is still a point whose ratio is 1 in
    # every resample, so training ends there instead of finding no threshold at all.
    cases = [
        Labelled(c.case_id, c.text, 0.0, 1.0 if i % 30 == 0 else 0.0, 1.0, 10.0)
        for i, c in enumerate(_cases(120))
    ]
    t = router.train(cases, target=0.95, seed=0)
    assert t.threshold == router.ALL_STRONG and not t.met_target
    assert (t.validation_point.ratio_lo, t.validation_point.ratio_hi) == (1.0, 1.0)
    assert t.test_point.cost_ratio == 1.0


def test_the_gate_passes_a_whole_interval_above_the_target_and_fails_an_inconclusive_one():
    cases = _cases(600)
    t = router.train(cases, target=0.95, seed=0)
    checks, verdict, pt = router.judge(t.model, t.threshold, cases, target=0.95)
    assert verdict == "passed" and pt.ratio_lo >= 0.95 and checks[0]["passed"]
    # Everything to cheap: it gets only the sums right, far below the target.
    checks, verdict, pt = router.judge(t.model, 0.0, cases, target=0.95)
    assert verdict == "failed" and pt.ratio_hi < 0.95 and "below" in checks[0]["detail"]
    # A router that loses a few cases, judged on few: the interval straddles the target.
    noisy = [
        Labelled(c.case_id, c.text, 1.0 if i % 12 else 0.0, 1.0, 1.0, 10.0) for i, c in enumerate(cases[:40])
    ]
    checks, verdict, pt = router.judge(t.model, 0.0, noisy, target=0.95)
    assert verdict == "failed" and pt.ratio_lo < 0.95 <= pt.ratio_hi and "inconclusive" in checks[0]["detail"]
