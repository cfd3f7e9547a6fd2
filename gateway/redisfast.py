"""A minimal pipelined Redis client for the two scripts on the request path.

Why not redis-py here: its asyncio client costs ~200 µs of CPU per command (retry wrappers, a
connection checked out of a pool per call, generic reply handling), which was half the gateway's
CPU per request in the profile. Every admission and settle is one ``EVALSHA`` whose reply is a
short array of integers, so one connection with requests pipelined in order and a tiny RESP parser
does the same job for a fraction. Everything else (snapshots, pub/sub, alerts) stays on redis-py.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from urllib.parse import unquote, urlparse


class RedisError(Exception):
    """An error reply from Redis."""


def _encode(*parts) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        if isinstance(p, bytes):
            b = p
        elif isinstance(p, str):
            b = p.encode()
        else:
            b = str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: FastRedis) -> None:
        self.owner = owner
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pending = self.owner._pending
        while pending:
            res = _parse(self.buf, 0)
            if res is None:
                return
            value, pos = res
            del self.buf[:pos]
            fut = pending.popleft()
            if not fut.done():
                if isinstance(value, RedisError):
                    fut.set_exception(value)
                else:
                    fut.set_result(value)

    def connection_lost(self, exc) -> None:
        self.owner._lost(exc)


def _parse(buf: bytearray, pos: int):
    """Parse one RESP2 reply at ``pos``; returns (value, next position) or None if incomplete."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind = buf[pos : pos + 1]
    line = bytes(buf[pos + 1 : end])
    nxt = end + 2
    if kind == b":":
        return int(line), nxt
    if kind == b"+":
        return line, nxt
    if kind == b"-":
        return RedisError(line.decode(errors="replace")), nxt
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            return None
        return bytes(buf[nxt : nxt + n]), nxt + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            res = _parse(buf, nxt)
            if res is None:
                return None
            item, nxt = res
            items.append(item)
        return items, nxt
    raise RedisError(f"unexpected reply type {kind!r}")


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError("redis reply timed out"))


class FastRedis:
    """One connection, commands pipelined in order, replies matched FIFO."""

    def __init__(self, url: str, *, connect_timeout: float = 3.0, reply_timeout: float = 5.0) -> None:
        u = urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 6379
        self.db = int((u.path or "/0").lstrip("/") or 0)
        self.username = unquote(u.username) if u.username else None
        self.password = unquote(u.password) if u.password else None
        self.connect_timeout = connect_timeout
        self.reply_timeout = reply_timeout
        self._proto: _Protocol | None = None
        self._pending: deque[asyncio.Future] = deque()
        self._lock = asyncio.Lock()
        self._scripts: dict[str, str] = {}

    def _lost(self, exc) -> None:
        self._proto = None
        err = ConnectionError(f"redis connection lost: {exc}")
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)

    async def _ensure(self) -> _Protocol:
        if self._proto is not None:
            return self._proto
        async with self._lock:
            if self._proto is not None:
                return self._proto
            loop = asyncio.get_running_loop()
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), self.host, self.port), self.connect_timeout
            )
            self._proto = proto
            if self.password:
                auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
                await self._call(proto, *auth)
            if self.db:
                await self._call(proto, "SELECT", self.db)
            return proto

    async def _call(self, proto: _Protocol, *parts):
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(fut)
        proto.transport.write(_encode(*parts))
        return await asyncio.wait_for(fut, self.reply_timeout) if self.reply_timeout else await fut

    async def execute(self, *parts):
        """Send one command and wait for its reply (at most ``reply_timeout`` seconds)."""
        proto = await self._ensure()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append(fut)
        proto.transport.write(_encode(*parts))
        # A timer, not wait_for: wait_for wraps every call in a task, which costs more than the call.
        handle = loop.call_later(self.reply_timeout, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()

    def script(self, source: str) -> str:
        """Register a Lua script; returns its SHA1 for ``evalsha``."""
        sha = hashlib.sha1(source.encode()).hexdigest()
        self._scripts[sha] = source
        return sha

    async def evalsha(self, sha: str, keys: list, args: list):
        """Run a registered script; loads it first when Redis does not know it (restart, flush)."""
        try:
            return await self.execute("EVALSHA", sha, len(keys), *keys, *args)
        except RedisError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            return await self.execute("EVAL", self._scripts[sha], len(keys), *keys, *args)

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None
