"""Durable usage metering: a local append-only spool with group-commit fsync, shipped to Postgres.

Why (docs/decisions/0003-gateway-usage-spool.md): a request's usage event must be durable before
its final chunk reaches the client, yet the gateway must never wait on Postgres. Every process
appends JSON lines to its own segment file; one writer task gathers whatever events arrived while
the previous fsync ran and makes them durable with a single ``write`` + ``fsync`` (group commit),
so the cost per event falls as load rises. A shipper thread copies complete lines to Postgres in
batches; the event UUID is unique there and inserts use ``ON CONFLICT DO NOTHING``, so re-shipping
after a crash or an outage can never double-count. Shipped offsets live next to each segment.

Segment files: ``<dir>/seg-<host>-<pid>-<ns>.jsonl``. The writing process holds an exclusive
``flock`` on its open segment; a segment whose lock can be taken belongs to nobody (closed or left
by a dead process) and is deleted once fully shipped. Only one shipper at a time works a directory
(``shipper.lock``), so N gateway processes sharing a spool directory ship each line once.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path

import orjson

log = logging.getLogger("gateway.spool")

SEGMENT_MAX_BYTES = 64 * 1024 * 1024

# The version of the spool line format below. Every line carries it as ``schema_version``; the
# shipper refuses a line of a version it does not know (shipping stops with ``last_error`` and the
# line stays in the spool) rather than guess. Bump it, and teach ``_event_row`` the old version,
# when COLUMNS change; tests/gateway/test_spool_contract.py fails when COLUMNS and the
# ``billing_usage_event`` table disagree.
SCHEMA_VERSION = 5
KNOWN_VERSIONS = frozenset({1, 2, 3, 4, 5})
# What each version added, and what an older line stands for: version 2 the traffic class, version 3
# the pool of the deployment that answered ("" where older lines did not say), version 4 a vote's
# samples spent and saved (0: not a vote), version 5 a semantic cache hit and what it saved.
V4_DEFAULTS = {"cache_hit": False, "saved_nanos": 0}
V3_DEFAULTS = {"vote_samples": 0, "vote_samples_saved": 0, **V4_DEFAULTS}
V2_DEFAULTS = {"pool": "", **V3_DEFAULTS}
V1_DEFAULTS = {"traffic_class": "standard", **V2_DEFAULTS}
# Columns of the table the shipper does not take from the line.
TABLE_OWN_COLUMNS = frozenset({"id", "received_at"})

# Column order shared by the event dicts the gateway writes and the INSERT the shipper runs.
COLUMNS = (
    "event_id",
    "tenant_id",
    "api_key_id",
    "public_model",
    "deployment_id",
    "deployment_slug",
    "pool",
    "version_id",
    "price_id",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost_nanos",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "status",
    "error_type",
    "http_status",
    "stream",
    "usage_estimated",
    "traffic_class",
    "vote_samples",
    "vote_samples_saved",
    "cache_hit",
    "saved_nanos",
    "started_at",
    "finished_at",
    "gateway",
)
TABLE = "billing_usage_event"
INSERT_SQL = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}, received_at) "
    f"VALUES ({', '.join(['%s'] * (len(COLUMNS) - 3))}, to_timestamp(%s), to_timestamp(%s), %s, now()) "
    "ON CONFLICT (event_id) DO NOTHING"
)


class SpoolWriter:
    """Appends events to this process's segment and fsyncs them in groups."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._size = 0
        self._pending: list[tuple[bytes, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False
        self.commits = 0
        self.events = 0

    def _open_segment(self) -> None:
        name = f"seg-{socket.gethostname()}-{os.getpid()}-{time.time_ns()}.jsonl"
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # The new directory entry must survive a crash too.
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._fd, self._size = fd, 0

    def start(self) -> None:
        self._open_segment()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def append(self, event: dict) -> asyncio.Future:
        """Queue one event; the returned future resolves once it is on disk."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((orjson.dumps(event) + b"\n", fut))
        self._wake.set()
        return fut

    def _write_sync(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self._size += len(data)
        if self._size >= SEGMENT_MAX_BYTES:
            old = self._fd
            self._open_segment()
            os.close(old)  # releases its flock: the shipper may now delete it once shipped

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                if self._closing:
                    return
                continue
            data = b"".join(line for line, _ in batch)
            try:
                await loop.run_in_executor(None, self._write_sync, data)
            except Exception as exc:  # noqa: BLE001 - a failed fsync must fail the requests, not hang them
                log.exception("spool write failed")
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.commits += 1
            self.events += len(batch)
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task:
            await self._task
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class UnknownSchemaVersion(ValueError):
    """A spool line written by a gateway newer than this shipper."""


def _event_row(ev: dict) -> tuple:
    version = ev.get("schema_version", 1)  # lines from before versioning are version 1
    if version not in KNOWN_VERSIONS:
        raise UnknownSchemaVersion(
            f"spool line of schema version {version!r}; this shipper knows {sorted(KNOWN_VERSIONS)}"
        )
    if version == 1:
        ev = {**V1_DEFAULTS, **ev}
    elif version == 2:
        ev = {**V2_DEFAULTS, **ev}
    elif version == 3:
        ev = {**V3_DEFAULTS, **ev}
    elif version == 4:
        ev = {**V4_DEFAULTS, **ev}
    return tuple(ev.get(c) for c in COLUMNS)


class Shipper:
    """Copies complete spool lines to Postgres in batches, from a thread (never blocks the loop)."""

    def __init__(self, directory: Path, database_url: str | None, *, interval_s: float, batch: int) -> None:
        self.dir = directory
        self.database_url = database_url
        self.interval_s = interval_s
        self.batch = batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn = None
        self.shipped = 0
        self.last_error: str | None = None

    def start(self) -> None:
        if not self.database_url:
            log.warning("no DATABASE_URL: usage events stay in the spool until a shipper runs")
            return
        self._thread = threading.Thread(target=self._run, name="spool-shipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _connect(self):
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.database_url, connect_timeout=3, autocommit=False)
        return self._conn

    def _run(self) -> None:
        lock_fd = os.open(self.dir / "shipper.lock", os.O_RDWR | os.O_CREAT, 0o644)
        have_lock = False
        backoff = self.interval_s
        while not self._stop.is_set():
            try:
                if not have_lock:
                    try:
                        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        have_lock = True
                    except BlockingIOError:
                        self._stop.wait(self.interval_s * 4)
                        continue
                moved = self.ship_once()
                self.last_error = None
                backoff = self.interval_s
                if not moved:
                    self._stop.wait(self.interval_s)
            except Exception as exc:  # noqa: BLE001 - Postgres down: keep the spool, retry with backoff
                self.last_error = repr(exc)
                log.warning("shipping usage failed (will retry): %s", exc)
                try:
                    if self._conn is not None:
                        self._conn.close()
                except Exception:  # noqa: BLE001
                    pass
                self._conn = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        # Final drain on shutdown so a clean stop leaves nothing behind when Postgres is up.
        try:
            if have_lock:
                while self.ship_once():
                    pass
        except Exception:  # noqa: BLE001
            pass
        os.close(lock_fd)

    def ship_once(self) -> int:
        """Ship up to one batch from each segment; returns how many lines were sent."""
        total = 0
        for seg in sorted(self.dir.glob("seg-*.jsonl")):
            total += self._ship_segment(seg)
        return total

    def _ship_segment(self, seg: Path) -> int:
        off_path = seg.with_suffix(".off")
        try:
            offset = int(off_path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            offset = 0
        with open(seg, "rb") as f:
            f.seek(offset)
            data = f.read(self.batch * 2048)
        end = data.rfind(b"\n")
        if end < 0:
            self._maybe_delete(seg, off_path, offset)
            return 0
        lines = data[: end + 1].splitlines()[: self.batch]
        consumed = sum(len(line) + 1 for line in lines)
        rows = []
        for line in lines:
            try:
                rows.append(_event_row(orjson.loads(line)))
            except orjson.JSONDecodeError:
                log.error("skipping corrupt spool line in %s at %d", seg.name, offset)
        conn = self._connect()
        with conn.cursor() as cur:
            cur.executemany(INSERT_SQL, rows)
        conn.commit()
        tmp = off_path.with_suffix(".off.tmp")
        tmp.write_text(str(offset + consumed))
        os.replace(tmp, off_path)
        self.shipped += len(rows)
        return len(rows)

    def _maybe_delete(self, seg: Path, off_path: Path, offset: int) -> None:
        """Delete a segment nobody writes any more once everything in it is shipped."""
        try:
            fd = os.open(seg, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a live writer owns it
            # Nobody writes it and no complete line is left: any partial tail was never fsynced,
            # so no client was ever told its request finished.
            seg.unlink(missing_ok=True)
            off_path.unlink(missing_ok=True)
        finally:
            os.close(fd)


def spool_pending_lines(directory: Path) -> int:
    """Lines written but not yet shipped, for /metrics and tests."""
    pending = 0
    for seg in directory.glob("seg-*.jsonl"):
        off_path = seg.with_suffix(".off")
        try:
            offset = int(off_path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            offset = 0
        with open(seg, "rb") as f:
            f.seek(offset)
            pending += f.read().count(b"\n")
    return pending
