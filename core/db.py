"""How timestamps reach PostgreSQL: always in UTC.

Python accepts UTC offsets up to ±23:59, PostgreSQL only up to ±15:59, so a filter value such as
``2026-01-01T00:00+21:17`` (valid ISO 8601, and what a fuzzer sends) would make the query fail with
a 500. Converting every aware datetime to UTC before it is sent is the same instant and always in
range; one psycopg dumper does it for every form, serializer and filter instead of each field.
"""

from __future__ import annotations

import datetime as dt

import psycopg
from psycopg.types.datetime import DatetimeBinaryDumper, DatetimeDumper


def _utc(obj: dt.datetime) -> dt.datetime:
    if obj.tzinfo is None:
        return obj
    try:
        return obj.astimezone(dt.UTC)
    except OverflowError:  # within a day of year 1 or 9999: the nearest instant that exists
        return (
            dt.datetime.min.replace(tzinfo=dt.UTC)
            if obj.year == 1
            else dt.datetime.max.replace(tzinfo=dt.UTC)
        )


class UtcDatetimeDumper(DatetimeDumper):
    def dump(self, obj):
        return super().dump(_utc(obj))


class UtcDatetimeBinaryDumper(DatetimeBinaryDumper):
    def dump(self, obj):
        return super().dump(_utc(obj))


def register_utc_dumpers() -> None:
    """Called from ``GovernorConfig.ready()``, before any connection is opened."""
    psycopg.adapters.register_dumper(dt.datetime, UtcDatetimeDumper)
    psycopg.adapters.register_dumper(dt.datetime, UtcDatetimeBinaryDumper)
