"""Arrival processes, length distributions and schedule sampling (engines.workload)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines import workload as W

N = 20000


def _gaps(arrival: W.Arrival) -> np.ndarray:
    wl = W.Workload(arrival=arrival, input=W.fixed(10), output=W.fixed(10))
    return np.diff(wl.sample_requests(N, seed=3).arrival_s)


def test_constant_arrivals_are_evenly_spaced():
    gaps = _gaps(W.constant(4.0))
    assert np.allclose(gaps, 0.25)


def test_poisson_mean_gap_and_unit_cv():
    gaps = _gaps(W.poisson(5.0))
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_mean_gap_and_cv_follow_burstiness(burstiness):
    gaps = _gaps(W.gamma(10.0, burstiness))
    assert gaps.mean() == pytest.approx(0.1, rel=0.04)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.06)


@pytest.mark.parametrize(
    ("dist", "mean"),
    [
        (W.fixed(128), 128),
        (W.uniform(100, 300), 200),
        (W.normal(500, 100), 500),
        (W.lognormal(800, 0.6), 800),
    ],
)
def test_length_distribution_means(dist, mean):
    wl = W.Workload(arrival=W.poisson(1.0), input=dist, output=W.fixed(1))
    lens = wl.sample_requests(N, seed=7).input_len
    assert lens.mean() == pytest.approx(mean, rel=0.03)
    assert lens.min() >= 1
    assert lens.dtype == np.int64


def test_empirical_lengths_from_jsonl(tmp_path):
    path = tmp_path / "lens.jsonl"
    rows = [{"input_len": 100, "output_len": 10}, {"input_len": 300, "output_len": 30}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    wl = W.Workload(arrival=W.constant(1.0), empirical_path=str(path))
    s = wl.sample_requests(N, seed=1)
    assert s.input_len.mean() == pytest.approx(200, rel=0.03)
    # Pairs are sampled jointly.
    assert set(zip(s.input_len.tolist(), s.output_len.tolist(), strict=True)) == {(100, 10), (300, 30)}
    assert wl.mean_input_len == 200


def test_empirical_rejects_rows_without_lengths(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="input_len"):
        W.Workload(arrival=W.constant(1.0), empirical_path=str(path))


def test_duration_sampling_keeps_arrivals_inside_the_window():
    wl = W.Workload(arrival=W.poisson(20.0), input=W.fixed(10), output=W.fixed(10))
    s = wl.sample_requests(duration=100.0, seed=2)
    assert s.arrival_s[0] == 0.0
    assert s.arrival_s.max() < 100.0
    assert len(s) == pytest.approx(2000, rel=0.1)


def test_closed_loop_needs_a_count():
    wl = W.Workload(arrival=W.fixed_concurrency(8), input=W.fixed(10), output=W.fixed(10))
    s = wl.sample_requests(50, seed=0)
    assert s.concurrency == 8 and len(s) == 50
    with pytest.raises(ValueError):
        wl.sample_requests(duration=10.0)


def test_shared_prefix_lengths_and_groups():
    wl = W.Workload(
        arrival=W.poisson(1.0),
        input=W.uniform(100, 200),
        output=W.fixed(5),
        shared_prefix_ratio=0.5,
        prefix_groups=3,
    )
    s = wl.sample_requests(1000, seed=4)
    assert np.array_equal(s.prefix_len, np.floor(0.5 * s.input_len))
    assert set(s.prefix_group.tolist()) == {0, 1, 2}


def test_same_seed_same_schedule_and_round_trip():
    wl = W.Workload(
        arrival=W.gamma(3.0, 0.5), input=W.lognormal(1000, 0.5, max=4000), output=W.normal(200, 50, min=10),
        shared_prefix_ratio=0.25, prefix_groups=2,
    )  # fmt: skip
    a = wl.sample_requests(500, seed=11)
    b = W.Workload.from_dict(json.loads(json.dumps(wl.to_dict()))).sample_requests(500, seed=11)
    c = wl.sample_requests(500, seed=12)
    for name in ("arrival_s", "input_len", "output_len", "prefix_group", "prefix_len"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.input_len, c.input_len)
    assert a.input_len.max() <= 4000 and a.output_len.min() >= 10
    assert len(a.rows()) == 500


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError):
        W.poisson(0)
    with pytest.raises(ValueError):
        W.uniform(10, 5)
    with pytest.raises(ValueError):
        W.Workload(arrival=W.poisson(1.0), input=W.fixed(1))
    with pytest.raises(ValueError):
        W.Workload(arrival=W.poisson(1.0), input=W.fixed(1), output=W.fixed(1), shared_prefix_ratio=2)


@pytest.mark.parametrize("rate,duration", [(10, 1.0), (3, 7.0), (50, 60.0)])
def test_a_duration_window_holds_exactly_rate_times_duration_constant_arrivals(rate, duration):
    wl = W.Workload(arrival=W.constant(rate), input=W.fixed(10), output=W.fixed(10))
    schedule = wl.sample_requests(duration=duration, seed=0)
    assert len(schedule.arrival_s) == round(rate * duration)
