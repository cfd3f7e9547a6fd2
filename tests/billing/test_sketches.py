"""The sketch merge: bins add exactly across offsets, sparse bins and zeros; empty inputs give None."""

from __future__ import annotations

import random

from ddsketch import DDSketch
from ddsketch.pb import ddsketch_pb2 as pb

from billing.sketches import GAMMA, bins_loads, key_of, sketch_merge, sketch_of


def test_merging_serialized_sketches_equals_one_sketch_of_all_values():
    rng = random.Random(7)
    groups = [[rng.lognormvariate(m, 0.8) for _ in range(500)] for m in (1.0, 3.0, 6.0)]  # far-apart offsets
    groups.append([0.0, -1.0, 5.0])  # zeros and negatives count as zeros
    merged = sketch_merge([sketch_of(g) for g in groups] + [None, b""])
    whole = sketch_merge([sketch_of([v for g in groups for v in g])])
    assert merged.count == whole.count == 1503
    assert merged._zero_count == whole._zero_count == 2
    for q in (0.01, 0.5, 0.95, 0.99):
        assert merged.get_quantile_value(q) == whole.get_quantile_value(q)
    reference = DDSketch(0.01)
    for v in (v for g in groups for v in g if v > 0):
        reference.add(v)
    assert abs(merged.get_quantile_value(0.95) / reference.get_quantile_value(0.95) - 1) < 0.03


def test_sparse_bins_from_other_writers_are_added_to_contiguous_ones():
    sparse = pb.DDSketch(
        mapping=pb.IndexMapping(gamma=GAMMA, indexOffset=0.0, interpolation=pb.IndexMapping.NONE),
        positiveValues=pb.Store(binCounts={key_of(10.0): 3.0, key_of(1000.0): 2.0}),
        negativeValues=pb.Store(),
        zeroCount=1.0,
    ).SerializeToString()
    merged = sketch_merge([sparse, sketch_of([10.0, 10.0])])
    bins, zero = bins_loads(sketch_of([10.0] * 5 + [1000.0] * 2 + [0.0]))
    assert merged.count == 8 and merged._zero_count == zero == 1
    assert merged.get_quantile_value(0.99) == merged.get_quantile_value(1.0)
    assert sum(bins.values()) == 7


def test_nothing_to_merge_is_none():
    assert sketch_merge([]) is None
    assert sketch_merge([None, b""]) is None
