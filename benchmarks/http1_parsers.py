"""What parsing a streamed response costs: http1's parser (llhttp) against h11 and a decoder in Python.

The question ADR 0029 answers with these figures: could the one HTTP/1.1 client parse with h11
(pure Python, the parser httpx uses) or with a decoder of our own in Python, instead of llhttp
through httptools? Each parser is fed the same bytes, the way a client's ``data_received`` would feed
it, and must give back the same body; the figure is CPU µs per response, median of ``--repeats``.

Three shapes of a 64-token chat stream (SSE events of ~190 bytes):

- ``one_read``: the whole response in one read, the stream one chunk: what the no-delay engine of
  ``benchmarks.gateway --cpu-only`` sends;
- ``chunks_one_read``: 65 chunks in one read (a client that fell behind a fast stream);
- ``chunk_per_read``: 65 chunks, one read each: a paced stream, as real decoding sends it.

    python -m benchmarks.http1_parsers [--json var/bench-http1-parsers.json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import h11  # noqa: E402
import orjson  # noqa: E402

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from http1 import ResponseParser  # noqa: E402

HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 12:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
EVENT = orjson.dumps(
    {
        "id": "chatcmpl-0123456789abcdef",
        "object": "chat.completion.chunk",
        "created": 1796212800,
        "model": "bench-llama",
        "choices": [{"index": 0, "delta": {"content": " token"}, "logprobs": None, "finish_reason": None}],
    }
)
EVENTS = [b"data: " + EVENT + b"\n\n"] * 64 + [b"data: [DONE]\n\n"]
BODY = b"".join(EVENTS)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SHAPES = {
    "one_read": [HEAD + _chunk(BODY) + b"0\r\n\r\n"],
    "chunks_one_read": [HEAD + b"".join(_chunk(e) for e in EVENTS) + b"0\r\n\r\n"],
    "chunk_per_read": [HEAD] + [_chunk(e) for e in EVENTS] + [b"0\r\n\r\n"],
}


# ------------------------------------------------------------------ the parsers


def llhttp_parser():
    """http1's: one ResponseParser per connection, ``begin()`` per response."""
    p = ResponseParser()

    def parse(reads: list[bytes]) -> bytes:
        p.begin()
        out = [p.feed(r) for r in reads]
        assert p.complete
        return b"".join(out)

    return parse


def h11_parser():
    """h11 as a client uses it: one Connection, a request sent per response, events read until
    EndOfMessage, then the next cycle."""
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="POST", target="/v1/chat/completions", headers=[("host", "x"), ("content-length", "0")]
    )

    def parse(reads: list[bytes]) -> bytes:
        conn.send(request)
        conn.send(h11.EndOfMessage())
        out = []
        for r in reads:
            conn.receive_data(r)
            while True:
                ev = conn.next_event()
                if ev is h11.NEED_DATA or type(ev) is h11.EndOfMessage:
                    break
                if type(ev) is h11.Data:
                    out.append(ev.data)
        conn.start_next_cycle()
        return b"".join(out)

    return parse


class PythonChunked:
    """A straightforward incremental decoder in Python: the head up to its blank line, then a loop
    of find/slice over each read's chunks. What "hand-written in Python" would cost."""

    def __init__(self) -> None:
        self.buf = b""
        self.head = None
        self.left = 0  # payload bytes of the current chunk still to come
        self.state = "head"

    def feed(self, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        out = []
        pos = 0
        end = len(buf)
        while pos < end:
            if self.state == "head":
                e = buf.find(b"\r\n\r\n", pos)
                if e < 0:
                    break
                lines = buf[pos:e].split(b"\r\n")
                self.head = (int(lines[0][9:12]), [ln.split(b":", 1) for ln in lines[1:]])
                pos = e + 4
                self.state = "size"
            elif self.state == "size":
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                size_line = buf[pos:nl].split(b";", 1)[0].strip()
                if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
                    raise ValueError(f"bad chunk size {size_line!r}")
                self.left = int(size_line, 16)
                pos = nl + 2
                self.state = "data" if self.left else "trailer"
            elif self.state == "data":
                take = min(self.left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                if self.left == 0:
                    self.state = "crlf"
            elif self.state == "crlf":
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ValueError("chunk without CRLF")
                pos += 2
                self.state = "size"
            elif self.state == "trailer":
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                blank = nl == pos  # the blank line after the trailers ends the body
                pos = nl + 2
                if blank:
                    self.state = "done"
            else:
                break
        self.buf = buf[pos:] if pos < end and self.state != "done" else b""
        return b"".join(out)


def python_parser():
    def parse(reads: list[bytes]) -> bytes:
        d = PythonChunked()
        out = b"".join(d.feed(r) for r in reads)
        assert d.state == "done", d.state
        return out

    return parse


PARSERS = {"http1_llhttp": llhttp_parser, "h11": h11_parser, "python_decoder": python_parser}


def measure(parse, reads: list[bytes], n: int, repeats: int) -> float:
    """Median CPU µs per response over ``repeats`` runs of ``n`` responses."""
    assert parse(reads) == BODY, "the parser must give back the body"
    runs = []
    for _ in range(repeats):
        t = time.process_time()
        for _ in range(n):
            parse(reads)
        runs.append((time.process_time() - t) / n * 1e6)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--json", dest="json_path")
    p.add_argument("--responses", type=int, default=2000, help="responses per run (h11: a tenth)")
    p.add_argument("--repeats", type=int, default=7)
    add_smoke_flag(p, responses=20, repeats=1)
    a = apply_smoke(p.parse_args(argv))
    figures: dict[str, dict[str, float]] = {}
    # Alternating per shape, so that a drift of a shared machine touches every parser alike.
    for shape, reads in SHAPES.items():
        for name, make in PARSERS.items():
            n = max(1, a.responses // 10) if name == "h11" else a.responses
            figures.setdefault(name, {})[shape] = measure(make(), reads, n, a.repeats)
    ratios = {
        name: {shape: us / figures["http1_llhttp"][shape] for shape, us in by_shape.items()}
        for name, by_shape in figures.items()
    }
    r = {
        "us_per_response": figures,
        "ratio_to_llhttp": ratios,
        "conditions": {
            "response": f"a 64-token chat stream, {len(BODY)} body bytes, {len(EVENTS)} SSE events",
            "shapes": {k: f"{len(v)} read(s)" for k, v in SHAPES.items()},
            "measure": f"median of {a.repeats} runs of {a.responses} responses (h11: {max(1, a.responses // 10)}), "
            "CPU time of this process",
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": sys.version.split()[0],
            "h11": h11.__version__,
        },
        "smoke": a.smoke,
    }
    print(f"\nCPU µs per response ({r['conditions']['response']}), median of {a.repeats}")
    print(f"{'parser':16}" + "".join(f"{s:>18}" for s in SHAPES))
    for name, by_shape in figures.items():
        cells = "".join(f"{by_shape[s]:10.1f} ({ratios[name][s]:4.1f}x)" for s in SHAPES)
        print(f"{name:16}{cells}")
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
