"""A small client for the Ray dashboard's Serve REST API (``/api/serve/applications/``).

Only the two calls the reconciler needs: PUT the whole declarative config, GET the instance
details. Connection failures and 5xx answers become ``RayUnreachable`` (transient: retried);
a 4xx answer to a PUT becomes ``RayRejected`` with Ray's own text (permanent until the config
changes).
"""

from __future__ import annotations

import time

import httpx
from django.conf import settings

APPLICATIONS_PATH = "/api/serve/applications/"


class RayUnreachable(Exception):
    """The dashboard did not answer, or answered 5xx: the cluster is down or starting."""


class RayRejected(Exception):
    """The dashboard refused the config (HTTP 4xx); the message is Ray's."""

    def __init__(self, status_code: int, text: str) -> None:
        super().__init__(text)
        self.status_code = status_code
        self.text = text


def _headers() -> dict[str, str]:
    # Ray 2.60 token auth: `Authorization: Bearer <token>` (ray/_private/authentication).
    token = settings.RAY_AUTH_TOKEN
    return {"Authorization": f"Bearer {token}"} if token else {}


def _client(timeout: float) -> httpx.Client:
    return httpx.Client(
        base_url=settings.RAY_DASHBOARD_URL.rstrip("/"),
        headers=_headers(),
        timeout=httpx.Timeout(timeout, connect=5.0),
        trust_env=False,  # a proxy from the environment must never sit between us and the head node
    )


def _refused(response: httpx.Response) -> RayUnreachable | None:
    """401/403: the cluster runs token auth and our RAY_AUTH_TOKEN is missing or wrong."""
    if response.status_code in (401, 403):
        hint = (
            "set RAY_AUTH_TOKEN"
            if not settings.RAY_AUTH_TOKEN
            else "RAY_AUTH_TOKEN is not this cluster's token"
        )
        return RayUnreachable(
            f"dashboard refused the request (HTTP {response.status_code}: {response.text[:200]}); {hint}"
        )
    return None


# A busy head node (or a busy CI machine) answers late rather than not at all: both calls are
# idempotent (GET, and a PUT of the whole desired state), so transport errors are retried a few
# times with backoff before they count as "unreachable".
ATTEMPTS = 3
BACKOFF_S = 1.0


def _send(method: str, *, timeout: float, **kwargs) -> httpx.Response:
    last: httpx.HTTPError | None = None
    for attempt in range(ATTEMPTS):
        try:
            with _client(timeout) as client:
                return client.request(method, APPLICATIONS_PATH, **kwargs)
        except httpx.HTTPError as exc:
            last = exc
            if attempt + 1 < ATTEMPTS:
                time.sleep(BACKOFF_S * (2**attempt))
    raise RayUnreachable(
        f"{settings.RAY_DASHBOARD_URL}: {last.__class__.__name__}: {last} (after {ATTEMPTS} attempts)"
    ) from last


def put_applications(config: dict, *, timeout: float = 60.0) -> None:
    """Deploy the whole declarative config; Ray deletes every application it leaves out."""
    response = _send("PUT", timeout=timeout, json=config)
    refused = _refused(response)
    if refused:
        raise refused
    if response.status_code >= 500:
        raise RayUnreachable(f"dashboard answered {response.status_code}: {response.text[:2000]}")
    if response.status_code >= 400:
        raise RayRejected(response.status_code, response.text)


def get_applications(*, timeout: float = 30.0) -> dict:
    """``ServeInstanceDetails`` as a dict: ``{"applications": {name: ApplicationDetails}, ...}``."""
    response = _send("GET", timeout=timeout)
    refused = _refused(response)
    if refused:
        raise refused
    if response.status_code >= 400:
        raise RayUnreachable(f"dashboard answered {response.status_code}: {response.text[:2000]}")
    try:
        return response.json()
    except ValueError as exc:
        raise RayUnreachable(f"dashboard answered something that is not JSON: {response.text[:200]}") from exc
