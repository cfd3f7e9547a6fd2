"""The shared stream pusher on both of its paths.

Plain path: a hand-written ASGI ``send`` (what any server other than uvicorn's httptools gives).
Fast path: a real uvicorn server on loopback; the bytes on the wire must be the ones uvicorn's own
``send`` writes, and the fast path must engage under the pinned uvicorn. If uvicorn's private request
cycle changes shape, ``test_fast_path_engages_under_pinned_uvicorn`` fails (the pusher itself falls
back to the plain path, so production keeps working, only slower).
"""

from __future__ import annotations

import asyncio
import types

import pytest
import uvicorn

from asgistream import BodyPusher, TaskPusher, fast_path_available, uvicorn_cycle
from asgistream.pusher import CYCLE_ATTRS, CYCLE_MODULE
from procs import free_port as _free_port

CHUNKS = [b"data: %d\n\n" % i * (1 + i % 5) for i in range(200)]


class Harness:
    """A plain ASGI ``send``: records messages; while ``gate`` is set, each send waits on it
    (flow control), as a server's send does when the client reads slowly."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.gate: asyncio.Future | None = None
        self.fail_after: int | None = None

    async def send(self, msg: dict) -> None:
        if self.fail_after is not None and len(self.messages) >= self.fail_after:
            raise OSError("client went away")
        if self.gate is not None:
            await self.gate
        self.messages.append(msg)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_plain_path_keeps_order_through_flow_control():
    async def main():
        loop = asyncio.get_running_loop()
        h = Harness()
        idle = []
        p = BodyPusher(h.send, loop, on_idle=lambda: idle.append(True))
        assert p.cycle is None
        p.push_body(CHUNKS[0])
        assert not p.busy and len(h.messages) == 1  # went out within the push, no task switch
        h.gate = loop.create_future()
        for c in CHUNKS[1:100]:
            p.push_body(c)
        assert p.busy  # the first gated send suspended; the rest queue behind it
        assert len(h.messages) == 1
        gate, h.gate = h.gate, None
        gate.set_result(None)
        await p.drain()
        assert not p.busy and idle == [True]
        for c in CHUNKS[100:]:
            p.push_body(c)
        p.push({"type": "http.response.body", "body": b"end", "more_body": False})
        await asyncio.wait_for(p.done, 5)
        p.push_body(b"after the end")  # dropped
        bodies = [m["body"] for m in h.messages]
        assert bodies == [*CHUNKS, b"end"]
        assert all(m["more_body"] for m in h.messages[:-1]) and not h.messages[-1]["more_body"]

    run(main())


def test_plain_path_failed_send_is_reported_and_later_messages_dropped():
    async def main():
        h = Harness()
        h.fail_after = 3
        p = BodyPusher(h.send, asyncio.get_running_loop())
        for c in CHUNKS[:10]:
            p.push_body(c)
        assert len(h.messages) == 3
        assert isinstance(p.error, OSError)
        with pytest.raises(OSError):
            await p.drain()
        with pytest.raises(OSError):
            await p.done

    run(main())


def test_close_ends_without_a_last_message():
    async def main():
        h = Harness()
        p = BodyPusher(h.send, asyncio.get_running_loop())
        p.push_body(b"a")
        p.close()
        p.push_body(b"b")
        await p.done
        assert [m["body"] for m in h.messages] == [b"a"]

    run(main())


def test_task_pusher_sends_in_order_from_its_own_task_and_flow_controls_above_its_high_water():
    """The ordinary way, kept for the benchmark's comparison (ADR 0029): every message goes out
    from one task of the stream's own; busy once more than high_water bytes wait, on_idle after."""

    async def main():
        loop = asyncio.get_running_loop()
        h = Harness()
        senders = set()
        send = h.send

        async def recording_send(msg):
            senders.add(asyncio.current_task())
            await send(msg)

        idle = []
        p = TaskPusher(recording_send, loop, on_idle=lambda: idle.append(True), high_water=100)
        p.push_body(CHUNKS[0])
        assert not h.messages and not p.busy  # nothing goes out within the push: the task sends it
        await p.drain()
        assert [m["body"] for m in h.messages] == [CHUNKS[0]]
        h.gate = loop.create_future()
        for c in CHUNKS[1:100]:
            p.push_body(c)
        assert p.busy  # far more than 100 bytes wait
        gate, h.gate = h.gate, None
        gate.set_result(None)
        await p.drain()
        assert not p.busy and idle == [True]
        p.push({"type": "http.response.body", "body": b"end", "more_body": False})
        await asyncio.wait_for(p.done, 5)
        p.push_body(b"after the end")  # dropped
        assert [m["body"] for m in h.messages] == [*CHUNKS[:100], b"end"]
        [task] = senders
        assert task is not asyncio.current_task() and task.done()

    run(main())


def test_task_pusher_failed_send_is_reported_and_close_ends_its_task():
    async def main():
        loop = asyncio.get_running_loop()
        h = Harness()
        h.fail_after = 3
        p = TaskPusher(h.send, loop)
        for c in CHUNKS[:10]:
            p.push_body(c)
        with pytest.raises(OSError):
            await p.drain()
        assert len(h.messages) == 3 and isinstance(p.error, OSError)
        with pytest.raises(OSError):
            await p.done
        q = TaskPusher(Harness().send, loop)
        q.close()
        await asyncio.wait([q.task], timeout=5)
        assert q.task.done() and q.done.done()

    run(main())


def test_a_foreign_or_reshaped_cycle_is_not_used():
    async def send(msg):  # a plain coroutine function: no request cycle behind it
        pass

    assert uvicorn_cycle(send) is None

    def fake_cycle(**overrides):
        cls = type("RequestResponseCycle", (), {"__module__": CYCLE_MODULE})
        cycle = cls()
        cycle.transport = types.SimpleNamespace(write=lambda b: None)
        cycle.flow = types.SimpleNamespace(write_paused=False)
        for a in CYCLE_ATTRS[2:]:
            setattr(cycle, a, False)
        for k, v in overrides.items():
            if v is None:
                delattr(cycle, k) if k in cycle.__dict__ else None
            else:
                setattr(cycle, k, v)

        async def send_(msg):
            pass

        return types.MethodType(lambda self, msg: send_(msg), cycle)

    assert uvicorn_cycle(fake_cycle()) is not None
    assert uvicorn_cycle(fake_cycle(chunked_encoding=None)) is None  # attribute gone
    assert uvicorn_cycle(fake_cycle(flow=types.SimpleNamespace())) is None  # flow reshaped
    assert uvicorn_cycle(fake_cycle(disconnected="no")) is None  # type changed


# --- a real uvicorn on loopback -------------------------------------------------------------------


def _app(record: dict, fast_path: bool):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        await receive()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        p = BodyPusher(send, asyncio.get_running_loop(), fast_path=fast_path)
        record["fast_available"] = fast_path_available(send)
        for c in CHUNKS:
            p.push_body(c)
        p.push({"type": "http.response.body", "body": b"tail", "more_body": False})
        await p.done
        record["fast_chunks"] = p.fast_chunks

    return app


async def _serve_once(http: str, fast_path: bool) -> tuple[bytes, dict]:
    record: dict = {}
    port = _free_port()
    config = uvicorn.Config(
        _app(record, fast_path), host="127.0.0.1", port=port, http=http, log_level="error", lifespan="on"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET / HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        raw = await r.read()
        w.close()
    finally:
        server.should_exit = True
        await task
    return raw.split(b"\r\n\r\n", 1)[1], record


def _dechunk(wire: bytes) -> bytes:
    out, rest = [], wire
    while True:
        size, rest = rest.split(b"\r\n", 1)
        n = int(size, 16)
        if n == 0:
            return b"".join(out)
        out.append(rest[:n])
        assert rest[n : n + 2] == b"\r\n"
        rest = rest[n + 2 :]


def test_fast_path_engages_under_pinned_uvicorn_and_writes_what_uvicorn_writes():
    fast_wire, rec_fast = run(_serve_once("httptools", True))
    plain_wire, rec_plain = run(_serve_once("httptools", False))
    # If this fails after a uvicorn upgrade, its private request cycle changed: re-read
    # uvicorn/protocols/http/httptools_impl.py, adapt asgistream.pusher and ADR 0010.
    assert rec_fast["fast_available"], f"uvicorn {uvicorn.__version__}: fast path no longer engages"
    assert rec_fast["fast_chunks"] == len(CHUNKS)
    assert rec_plain["fast_chunks"] == 0
    assert fast_wire == plain_wire  # byte for byte what uvicorn's own send writes
    assert _dechunk(fast_wire) == b"".join(CHUNKS) + b"tail"


def test_plain_path_under_uvicorns_h11_server():
    wire, rec = run(_serve_once("h11", True))
    assert not rec["fast_available"] and rec["fast_chunks"] == 0
    assert _dechunk(wire) == b"".join(CHUNKS) + b"tail"
