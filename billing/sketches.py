"""Latency sketches: DDSketch (1% relative accuracy, logarithmic mapping), stored as its protobuf.

DDSketches merge exactly: bucket counts add. The rollup therefore never builds sketch objects per
event: PostgreSQL computes each value's bucket key, ``ceil(ln(v) / ln(gamma))`` (the same key as
``ddsketch.LogarithmicMapping``), and counts per key; Python adds the counts into bins and writes
the standard DDSketch protobuf, which any DDSketch library reads. Percentiles over any set of rows
come from one merged sketch, never from averaging percentiles. This module imports no Django.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from ddsketch import DDSketch
from ddsketch.pb import ddsketch_pb2 as pb
from ddsketch.pb.proto import DDSketchProto

RELATIVE_ACCURACY = 0.01
GAMMA = 1 + 2 * RELATIVE_ACCURACY / (1 - RELATIVE_ACCURACY)
LN_GAMMA = math.log1p(2 * RELATIVE_ACCURACY / (1 - RELATIVE_ACCURACY))

Bins = dict[int, int]  # bucket key -> count; key None is kept as the zero count


def key_of(value: float) -> int | None:
    """The bucket key of a positive value (None for values ≤ 0, counted as zeros)."""
    if value is None or value <= 0:
        return None
    return math.ceil(math.log(value) / LN_GAMMA)


def bins_dumps(bins: Bins, zero: int = 0) -> bytes | None:
    """The DDSketch protobuf of positive bins (and a zero count); None when empty."""
    if not bins and not zero:
        return None
    store = pb.Store()
    if bins:
        lo, hi = min(bins), max(bins)
        store.contiguousBinIndexOffset = lo
        store.contiguousBinCounts.extend(float(bins.get(k, 0)) for k in range(lo, hi + 1))
    proto = pb.DDSketch(
        mapping=pb.IndexMapping(gamma=GAMMA, indexOffset=0.0, interpolation=pb.IndexMapping.NONE),
        positiveValues=store,
        negativeValues=pb.Store(),
        zeroCount=float(zero),
    )
    return proto.SerializeToString()


def bins_loads(data: bytes | memoryview | None) -> tuple[Bins, int]:
    """(bins, zero count) of a serialized sketch; empty for None."""
    if not data:
        return {}, 0
    proto = pb.DDSketch()
    proto.ParseFromString(bytes(data))
    store = proto.positiveValues
    k0 = store.contiguousBinIndexOffset
    bins = {k0 + i: int(c) for i, c in enumerate(store.contiguousBinCounts) if c}
    for k, c in store.binCounts.items():
        bins[k] = bins.get(k, 0) + int(c)
    return bins, int(proto.zeroCount)


def bins_add(into: Bins, other: Bins) -> Bins:
    for k, c in other.items():
        into[k] = into.get(k, 0) + c
    return into


def sketch_merge(blobs: Iterable[bytes | memoryview | None]) -> DDSketch | None:
    """One DDSketch from many serialized ones (None when none holds a value).

    A tenant's cost page merges a few thousand sketches of ~100 contiguous bins each: the counts
    are added as arrays at their offsets (a dict per sketch took 0.6 s of a 0.9 s page at 10 M
    events; see docs/decisions/0012). Counts stay exact: float64 holds integers up to 2^53.
    """
    parts: list[tuple[int, np.ndarray]] = []
    bins: Bins = {}
    zero = 0
    for blob in blobs:
        if not blob:
            continue
        proto = pb.DDSketch()
        proto.ParseFromString(bytes(blob))
        store = proto.positiveValues
        if len(store.contiguousBinCounts):
            parts.append(
                (store.contiguousBinIndexOffset, np.fromiter(store.contiguousBinCounts, dtype=np.float64))
            )
        for k, c in store.binCounts.items():  # the sparse form other DDSketch writers may use
            bins[k] = bins.get(k, 0) + int(c)
        zero += int(proto.zeroCount)
    if parts:
        lo = min(offset for offset, _ in parts)
        acc = np.zeros(max(offset + len(counts) for offset, counts in parts) - lo)
        for offset, counts in parts:
            acc[offset - lo : offset - lo + len(counts)] += counts
        for i in np.flatnonzero(acc):
            k = lo + int(i)
            bins[k] = bins.get(k, 0) + int(acc[i])
    data = bins_dumps(bins, zero)
    if data is None:
        return None
    proto = pb.DDSketch()
    proto.ParseFromString(data)
    return DDSketchProto.from_proto(proto)


def sketch_of(values: Iterable[float]) -> bytes | None:
    """Serialize plain values (tests and tools): the same bins the rollup's SQL computes."""
    bins: Bins = {}
    zero = 0
    for v in values:
        k = key_of(v)
        if k is None:
            zero += 1
        else:
            bins[k] = bins.get(k, 0) + 1
    return bins_dumps(bins, zero)


def sketch_quantiles(
    sketch: DDSketch | None, qs: Iterable[float] = (0.5, 0.95, 0.99)
) -> dict[str, float | None]:
    """``{"p50": …, "p95": …}`` from a sketch; None values when it is empty."""
    out: dict[str, float | None] = {}
    for q in qs:
        out[f"p{round(q * 100):d}"] = (
            sketch.get_quantile_value(q) if sketch is not None and sketch.count else None
        )
    return out
