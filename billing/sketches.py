"""Latency sketches: DDSketch with 1% relative accuracy, serialized as its protobuf.

DDSketches merge exactly (bucket counts add), so percentiles over any set of rollup rows come from
one merged sketch. This module imports no Django so benchmarks and tests can use it directly.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddsketch import DDSketch
from ddsketch.pb import ddsketch_pb2
from ddsketch.pb.proto import DDSketchProto

RELATIVE_ACCURACY = 0.01


def sketch_new() -> DDSketch:
    return DDSketch(relative_accuracy=RELATIVE_ACCURACY)


def sketch_dumps(sketch: DDSketch | None) -> bytes | None:
    if sketch is None or sketch.count == 0:
        return None
    return DDSketchProto.to_proto(sketch).SerializeToString()


def sketch_loads(data: bytes | memoryview | None) -> DDSketch | None:
    if not data:
        return None
    proto = ddsketch_pb2.DDSketch()
    proto.ParseFromString(bytes(data))
    return DDSketchProto.from_proto(proto)


def sketch_merge(blobs: Iterable[bytes | memoryview | None]) -> DDSketch | None:
    """One sketch from many serialized ones (None when none holds a value)."""
    merged: DDSketch | None = None
    for blob in blobs:
        s = sketch_loads(blob)
        if s is None:
            continue
        if merged is None:
            merged = s
        else:
            merged.merge(s)
    return merged


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
