"""The one place that writes the gateway's configuration snapshot to Redis.

The snapshot has two sections, each built and published by the app that owns its data, so neither
app imports the other:

- ``tenancy`` (billing): ``keys``, ``tenants`` (limits and budgets) and ``prices``;
- ``routes`` (deployments): ``routes``;
- ``routers`` (evaluations): ``routers``, the active router policy of each route that has one.

Each section is stored under ``<prefix>snapshot:<section>``; every publish increments
``<prefix>snapshot:version`` in the same transaction and announces the new version on the
``<prefix>snapshot`` channel. Gateways reload every section when the version moves (pub/sub for
speed, polling as the fallback) and serve from memory. The contract of each section's content is
in ``snapshot.contract``. This module is Django-free: callers pass a Redis client.
"""

from __future__ import annotations

import orjson

CHANNEL = "snapshot"
VERSION_KEY = "snapshot:version"
SECTIONS = ("tenancy", "routes", "routers")
SECTION_FIELDS = {
    "tenancy": ("keys", "tenants", "prices", "batch_prices", "cache_prices"),
    "routes": ("routes",),
    "routers": ("routers",),
}


def section_key(section: str) -> str:
    if section not in SECTIONS:
        raise ValueError(f"unknown snapshot section {section!r}; expected one of {SECTIONS}")
    return f"snapshot:{section}"


def publish_section(client, *, prefix: str, section: str, data: dict) -> int:
    """Store one section and announce it; returns the snapshot's new version.

    ``data`` holds exactly the section's fields (``SECTION_FIELDS``) plus an optional
    ``generated_at``, so a section can never overwrite another's data.
    """
    key = section_key(section)
    expected = set(SECTION_FIELDS[section])
    if set(data) - {"generated_at"} != expected:
        raise ValueError(f"section {section!r} takes the fields {sorted(expected)}, got {sorted(data)}")
    pipe = client.pipeline(transaction=True)
    pipe.set(prefix + key, orjson.dumps(data))
    pipe.incr(prefix + VERSION_KEY)
    version = int(pipe.execute()[1])
    client.publish(prefix + CHANNEL, version)
    return version
