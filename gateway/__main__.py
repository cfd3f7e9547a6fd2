"""``python -m gateway --host 127.0.0.1 --port 8080 [--workers N]``: run the gateway under uvicorn.

With ``--workers N`` (N >= 2, what ``python -m governor run`` starts), ``kill -HUP <supervisor pid>``
restarts the workers one at a time without refusing or cutting a request.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gateway", description="Governor's OpenAI-compatible gateway"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    parser.add_argument(
        "--drain-timeout",
        type=int,
        default=int(os.environ.get("GATEWAY_DRAIN_TIMEOUT_S", "300")),
        help="seconds a stopping worker waits for its in-flight streams (SIGTERM, or SIGHUP's restart)",
    )
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--access-log", action="store_true", help="uvicorn access log (costs CPU per request)"
    )
    args = parser.parse_args(argv)

    # Each worker takes its share of a deployment's in-flight limit (gateway.admission).
    os.environ["GATEWAY_WORKERS"] = str(max(1, args.workers))
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker writes its metrics to files here; /metrics sums them.
        d = tempfile.mkdtemp(prefix="gateway-prom-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    elif os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        d = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, exist_ok=True)

    import uvicorn

    from gateway.protocol import KEEP_ALIVE_S, MAX_CONNECTIONS, connection_cap, raise_open_file_limit

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    log = logging.getLogger("gateway")
    # Before the workers start: they inherit the limit. Each worker's descriptors are its own, so
    # the cap below is per worker.
    soft_before, soft, hard = raise_open_file_limit()
    cap = connection_cap(soft)
    log.info(
        "open files: soft limit %d -> %d (hard limit %s); at most %d client connections per worker",
        soft_before,
        soft,
        "unlimited" if hard == -1 else hard,
        cap,
    )
    if cap < MAX_CONNECTIONS:
        log.warning(
            "the open-file limit (%d) allows %d client connections per worker, fewer than "
            "GATEWAY_MAX_CONNECTIONS (%d): raise the hard limit (ulimit -Hn, LimitNOFILE=)",
            soft,
            cap,
            MAX_CONNECTIONS,
        )

    uvicorn.run(
        "gateway.app:app",
        host=args.host,
        port=args.port,
        workers=args.workers if args.workers > 1 else None,
        loop="uvloop",
        # uvicorn's httptools protocol with a cap on request heads (431 past GATEWAY_MAX_HEADER_BYTES).
        http="gateway.protocol:HeaderLimitedHttpToolsProtocol",
        # The same cap if someone switches to h11 (httptools has no setting of its own).
        h11_max_incomplete_event_size=int(os.environ.get("GATEWAY_MAX_HEADER_BYTES") or 32 * 1024),
        lifespan="on",
        log_level=args.log_level,
        access_log=args.access_log,
        timeout_keep_alive=KEEP_ALIVE_S,
        # uvicorn counts connections (and requests in flight) when a request's head is complete and
        # answers 503 at or past this number; gateway.protocol answers it in the API's error shape,
        # closes connections far past it at once, and adds the head/body deadlines (ADR 0015).
        limit_concurrency=cap + 1,
        # A stopping worker closes its listening socket, finishes in-flight requests, then exits;
        # with --workers N, SIGHUP to the supervisor replaces workers one at a time (uvicorn starts
        # the new one and waits until it is ready before stopping the old), so the port never closes.
        timeout_graceful_shutdown=args.drain_timeout,
        # How long a new worker may take to finish startup before a restart gives up on it (uvicorn's
        # 5 s default is too short for a busy host: the restart would keep the old worker).
        timeout_worker_healthcheck=int(os.environ.get("GATEWAY_WORKER_READY_TIMEOUT_S", "60")),
        backlog=4096,
        # Per-request work we do not need: no proxy in front by default, no Server/Date headers.
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )


if __name__ == "__main__":
    main()
