"""One HTTP/1.1 client for the gateway, the load generator and the benchmarks (docs/decisions/0029).

A Django-free leaf that imports nothing of the project: the responses' heads and bodies parsed
incrementally (``http1.parse``, llhttp through httptools), keep-alive connections on ``asyncio.Protocol``
that hand each read's body bytes to a sink inside ``data_received``, and a small pool of them per
origin, with TLS through ``ssl`` (``http1.client``). What each user does with the bytes (the
gateway's flow control and timeouts, the load generator's timing and SSE) stays with the user.
"""

from http1.client import Connection, ConnectionClosed, ConnectTimeout, Origin, Pool, request_bytes, split_url
from http1.parse import Head, ProtocolError, ResponseParser

__all__ = [
    "ConnectTimeout",
    "Connection",
    "ConnectionClosed",
    "Head",
    "Origin",
    "Pool",
    "ProtocolError",
    "ResponseParser",
    "request_bytes",
    "split_url",
]
