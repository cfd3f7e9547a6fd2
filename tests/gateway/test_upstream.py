"""What the gateway's upstream client keeps of its own around ``http1``: the idle deadline of a
stream and of an answer read whole, the errors the stages expect, and keep-alive to a deployment.
Against servers on loopback in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.upstream import UpstreamError, UpstreamPool

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@contextlib.asynccontextmanager
async def deployment(script):
    """A deployment whose answer to each request is ``script(writer)`` (a coroutine)."""
    connections = []

    async def serve(reader, writer):
        connections.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await script(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions", connections
    finally:
        for w in connections:
            w.close()
        server.close()


def streamed(resp) -> tuple[list[bytes], asyncio.Future]:
    got: list[bytes] = []
    ended = asyncio.get_running_loop().create_future()
    resp.stream(got.append, lambda exc: ended.done() or ended.set_result(exc))
    return got, ended


async def test_a_stream_that_goes_silent_ends_with_a_timeout_after_the_idle_deadline():
    never = asyncio.Event()

    async def stall(writer):
        writer.write(HEAD + chunk(b"data: 1\n\n"))
        await never.wait()

    async with deployment(stall) as (url, _):
        pool = UpstreamPool(connect_timeout=5, idle_timeout=0.3)
        resp = await pool.post(url, b"{}")
        got, ended = streamed(resp)
        exc = await asyncio.wait_for(ended, 10)
        assert isinstance(exc, TimeoutError) and "deployment sent nothing" in str(exc)
        assert b"".join(got) == b"data: 1\n\n"
        resp.release()  # not reusable: closed, never back in the pool
        assert not pool.pool._idle.get(pool._target(url)[0])
        never.set()
        await pool.close()


async def test_a_stream_that_keeps_sending_outlives_the_idle_deadline():
    """Every event arrives well within the deadline, the whole stream takes longer than it."""

    async def paced(writer):
        writer.write(HEAD)
        for i in range(12):
            await asyncio.sleep(0.05)  # the deployment's pace, not a wait of the test
            writer.write(chunk(b"data: %d\n\n" % i))
        writer.write(b"0\r\n\r\n")

    async with deployment(paced) as (url, _):
        pool = UpstreamPool(connect_timeout=5, idle_timeout=0.4)
        resp = await pool.post(url, b"{}")
        got, ended = streamed(resp)
        assert await asyncio.wait_for(ended, 30) is None
        assert b"".join(got) == b"".join(b"data: %d\n\n" % i for i in range(12))
        resp.stop_stream()
        resp.release()
        await pool.close()


async def test_an_answer_read_whole_that_stalls_raises_a_timeout():
    never = asyncio.Event()

    async def stall(writer):
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial":')
        await never.wait()

    async with deployment(stall) as (url, _):
        pool = UpstreamPool(connect_timeout=5, idle_timeout=0.3)
        resp = await pool.post(url, b"{}")
        with pytest.raises(TimeoutError, match="deployment sent nothing"):  # not the test's deadline
            await asyncio.wait_for(resp.read_all(), 10)
        resp.release()
        never.set()
        await pool.close()


async def test_a_broken_answer_is_an_upstream_error_and_keep_alive_is_reused_otherwise():
    answers = iter(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",
        ]
    )

    async def answer(writer):
        writer.write(next(answers))

    async with deployment(answer) as (url, connections):
        pool = UpstreamPool(connect_timeout=5, idle_timeout=5)
        for _ in range(2):
            resp = await pool.post(url, b"{}")
            assert resp.status == 200 and await resp.read_all() == b"{}"
            resp.release()
        assert len(connections) == 1  # kept alive
        resp = await pool.post(url, b"{}")
        with pytest.raises(UpstreamError, match="chunk size"):
            await asyncio.wait_for(resp.read_all(), 10)
        resp.release()
        await pool.close()


async def test_a_deployment_that_refuses_or_closes_before_answering_is_a_connection_error():
    async def hang_up(writer):
        writer.close()

    async with deployment(hang_up) as (url, _):
        pool = UpstreamPool(connect_timeout=5, idle_timeout=5)
        with pytest.raises(UpstreamError, match="before a response"):
            await pool.post(url, b"{}")
        await pool.close()
    with pytest.raises(OSError):
        await UpstreamPool(connect_timeout=5, idle_timeout=5).post(url, b"{}")
