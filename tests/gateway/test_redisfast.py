"""The gateway's minimal Redis client against the real Redis: replies, errors, unknown scripts."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.redisfast import FastRedis, RedisError, _parse
from tests.gateway.conftest import REDIS_URL


def test_parser_handles_every_reply_kind_and_partial_input():
    buf = bytearray(b"*3\r\n:5\r\n$3\r\nabc\r\n*2\r\n+OK\r\n-ERR boom\r\n")
    value, pos = _parse(buf, 0)
    assert value[0] == 5 and value[1] == b"abc" and value[2][0] == b"OK"
    assert isinstance(value[2][1], RedisError) and pos == len(buf)
    assert _parse(bytearray(b"*2\r\n:1\r\n"), 0) is None
    assert _parse(bytearray(b"$5\r\nab"), 0) is None


def test_evalsha_loads_an_unknown_script_and_pipelines_concurrent_calls():
    async def run():
        r = FastRedis(REDIS_URL)
        # A script Redis has never seen: the first EVALSHA gets NOSCRIPT and falls back to EVAL.
        sha = r.script(f"-- {uuid.uuid4()}\nreturn {{tonumber(ARGV[1]) * 2, KEYS[1]}}")
        results = await asyncio.gather(*(r.evalsha(sha, [f"k{i}"], [i]) for i in range(200)))
        assert [x[0] for x in results] == [i * 2 for i in range(200)]
        assert results[7][1] == b"k7"
        with pytest.raises(RedisError):
            await r.execute("NOT_A_COMMAND")
        assert await r.execute("PING") == b"PONG"  # the connection survives an error reply
        r.close()

    asyncio.run(run())
