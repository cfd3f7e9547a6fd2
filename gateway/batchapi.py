"""``/v1/files`` and ``/v1/batches``: the OpenAI Batch API at the gateway's base URL.

The official ``openai`` client has one base URL, so these paths are served here; the batches
themselves live in the console (``batches``, Postgres). The gateway checks the key against its
snapshot (a bad key never reaches the console) and passes the request on to the console's
``/v1/...`` with the client's ``Authorization`` header, which the console checks again against
Postgres: nothing the gateway adds is trusted, so nothing outside can forge a tenant
(docs/decisions/0036). Uploads are read up to ``GATEWAY_MAX_UPLOAD_BYTES``; the console applies
the batch file limit itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.replies import new_request_id, send_error, send_reply
from gateway.stages.authenticate import auth_refusal, identify, read_body

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger("gateway")

PASS_HEADERS = (b"authorization", b"content-type", b"x-governor-traffic-class", b"openai-beta")
PREFIXES = ("/v1/files", "/v1/batches")


def is_batch_api(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PREFIXES)


class ConsoleClient:
    """One aiohttp session to the console, made on first use."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = None

    def session(self):
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=300, sock_connect=5), auto_decompress=False
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def proxy(gw: Gateway, scope, receive, send) -> None:
    import aiohttp

    cfg = gw.config
    _key, _tenant, err, _ = identify(gw.snapshots.current, scope["headers"], gw.session_header)
    body = await read_body(scope, receive, cfg.max_upload_bytes)
    if body is None:
        await send_error(
            send,
            413,
            f"upload larger than {cfg.max_upload_bytes} bytes",
            "invalid_request_error",
            "file_too_large",
            "file",
            reason="body_too_large",
        )
        return
    if err:
        await send_reply(send, auth_refusal(err))
        return
    headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k in PASS_HEADERS}
    client = gw.console or ConsoleClient(cfg.console_url)
    gw.console = client
    qs = scope.get("query_string") or b""
    url = client.base_url + scope["path"] + (f"?{qs.decode('latin-1')}" if qs else "")
    try:
        async with client.session().request(scope["method"], url, data=body, headers=headers) as resp:
            data = await resp.read()
            out = [(b"content-type", resp.headers.get("content-type", "application/json").encode())]
            for name in ("content-disposition", "retry-after"):
                if name in resp.headers:
                    out.append((name.encode(), resp.headers[name].encode()))
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("console unreachable for %s: %s", scope["path"], exc)
        await send_error(
            send,
            503,
            "the batch service is unavailable right now; retry shortly",
            "service_unavailable",
            "console_unavailable",
            headers=[(b"retry-after", b"2")],
            reason="console_unavailable",
        )
        return
    out += [(b"content-length", str(len(data)).encode()), (b"x-request-id", new_request_id())]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": data})
