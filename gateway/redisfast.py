"""A minimal pipelined Redis client for the two scripts on the request path.

Why not redis-py here: its asyncio client costs ~200 µs of CPU per command (retry wrappers, a
connection checked out of a pool per call, generic reply handling), which was half the gateway's
CPU per request in the profile. Every admission and settle is one ``EVALSHA`` whose reply is a
short array of integers, so one connection with requests pipelined in order and a tiny RESP parser
does the same job for a fraction. Everything else (snapshots, pub/sub, alerts) stays on redis-py.

The URL means what it means to redis-py (its own ``parse_url`` reads it): ``rediss://`` connects
with TLS, verifying the server's certificate and host name unless the URL's ``ssl_cert_reqs`` /
``ssl_check_hostname`` say otherwise (``ssl_ca_certs``, ``ssl_ca_path``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_password``, ``ssl_min_version``, ``ssl_ciphers`` as in redis-py), and
``unix://`` uses a Unix socket. A connection is used for commands only once its AUTH and SELECT
have succeeded: until then every command waits, so none can run unauthenticated or on database 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import RedisSSLContext, SSLConnection, UnixDomainSocketConnection, parse_url
from redis.exceptions import NoScriptError, ResponseError


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
    """One connection; its own FIFO of reply futures, so a connection that died can never answer
    for the next one."""

    def __init__(self, owner: FastRedis) -> None:
        self.owner = owner
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future] = deque()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pending = self.pending
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
        self.fail(ConnectionError(f"redis connection lost: {exc}"))
        if self.owner._proto is self:
            self.owner._proto = None

    def fail(self, err: BaseException) -> None:
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(err)


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


def _ssl_context(kw: dict) -> ssl.SSLContext:
    """The TLS context redis-py would use for these URL parameters (its ``SSLConnection`` defaults:
    certificate required and host name checked)."""
    return RedisSSLContext(
        keyfile=kw.get("ssl_keyfile"),
        certfile=kw.get("ssl_certfile"),
        cert_reqs=kw.get("ssl_cert_reqs", "required"),
        include_verify_flags=kw.get("ssl_include_verify_flags"),
        exclude_verify_flags=kw.get("ssl_exclude_verify_flags"),
        ca_certs=kw.get("ssl_ca_certs"),
        ca_data=kw.get("ssl_ca_data"),
        ca_path=kw.get("ssl_ca_path"),
        check_hostname=kw.get("ssl_check_hostname", True),
        min_version=kw.get("ssl_min_version"),
        ciphers=kw.get("ssl_ciphers"),
        password=kw.get("ssl_password"),
    ).get()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError("redis reply timed out"))


class FastRedis:
    """One connection, commands pipelined in order, replies matched FIFO."""

    def __init__(self, url: str, *, connect_timeout: float = 3.0, reply_timeout: float = 5.0) -> None:
        kw = parse_url(url)  # redis-py's reading of the URL; raises ValueError on a scheme it refuses
        cls = kw.get("connection_class")
        self.path: str | None = kw.get("path") if cls is UnixDomainSocketConnection else None
        self.host = kw.get("host", "localhost")
        self.port = int(kw.get("port", 6379))
        self.db = int(kw.get("db", 0))
        self.username = kw.get("username")
        self.password = kw.get("password")
        self.ssl: ssl.SSLContext | None = _ssl_context(kw) if cls is SSLConnection else None
        self.connect_timeout = float(kw.get("socket_connect_timeout", connect_timeout))
        self.reply_timeout = reply_timeout
        self._proto: _Protocol | None = None
        self._lock = asyncio.Lock()
        self._scripts: dict[str, str] = {}

    async def _ensure(self) -> _Protocol:
        if self._proto is not None:
            return self._proto
        async with self._lock:
            if self._proto is not None:
                return self._proto
            loop = asyncio.get_running_loop()
            if self.path is not None:
                connect = loop.create_unix_connection(lambda: _Protocol(self), self.path)
            else:
                connect = loop.create_connection(
                    lambda: _Protocol(self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
            transport, proto = await asyncio.wait_for(connect, self.connect_timeout)
            try:
                # AUTH and SELECT pipelined; the connection is published only once both succeeded,
                # so no command of a concurrent caller (they wait on the lock) ever runs before them.
                handshake = []
                if self.password:
                    auth = (
                        ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
                    )
                    handshake.append(auth)
                if self.db:
                    handshake.append(("SELECT", self.db))
                if handshake:
                    await asyncio.gather(*(self._call(proto, *cmd) for cmd in handshake))
            except BaseException as exc:
                proto.fail(exc)
                transport.close()
                raise
            self._proto = proto
            return proto

    async def _call(self, proto: _Protocol, *parts):
        fut = asyncio.get_running_loop().create_future()
        proto.pending.append(fut)
        proto.transport.write(_encode(*parts))
        return await asyncio.wait_for(fut, self.reply_timeout) if self.reply_timeout else await fut

    async def execute(self, *parts):
        """Send one command and wait for its reply (at most ``reply_timeout`` seconds)."""
        proto = await self._ensure()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        proto.pending.append(fut)
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

    async def aclose(self) -> None:
        self.close()


# ------------------------------------------------------------------ the library it replaces


class RedisPyScripts:
    """``FastRedis``'s interface on redis-py's asyncio client (``GATEWAY_REDIS_CLIENT=redis-py``): what
    it replaced, kept as a working alternative so that ``python -m benchmarks.gateway --swaps`` can
    measure what the hand-written client still saves (docs/decisions/0029). The same URL, TLS and
    AUTH/SELECT handling, redis-py's own; a pool as the gateway's other redis-py client has."""

    def __init__(self, url: str, *, connect_timeout: float = 3.0, reply_timeout: float = 5.0) -> None:
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=256,
            timeout=5,
            socket_connect_timeout=connect_timeout,
            socket_timeout=reply_timeout,
        )
        self.client = Redis(connection_pool=pool)
        self._scripts: dict[str, str] = {}

    def script(self, source: str) -> str:
        sha = hashlib.sha1(source.encode()).hexdigest()
        self._scripts[sha] = source
        return sha

    async def execute(self, *parts):
        try:
            return await self.client.execute_command(*parts)
        except ResponseError as exc:
            raise RedisError(str(exc)) from exc

    async def evalsha(self, sha: str, keys: list, args: list):
        try:
            return await self.client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            pass
        except ResponseError as exc:
            raise RedisError(str(exc)) from exc
        return await self.execute("EVAL", self._scripts[sha], len(keys), *keys, *args)

    def close(self) -> None:
        pass  # aclose() closes the pool

    async def aclose(self) -> None:
        await self.client.aclose()


REDIS_CLIENTS = ("fastredis", "redis-py")


def redis_client(name: str, url: str):
    """The client of the request path's two scripts that ``GATEWAY_REDIS_CLIENT`` names: ``fastredis``
    (default) or ``redis-py``."""
    if name == "fastredis":
        return FastRedis(url)
    if name == "redis-py":
        return RedisPyScripts(url)
    raise ValueError(f"unknown redis client {name!r}; one of {', '.join(REDIS_CLIENTS)}")
