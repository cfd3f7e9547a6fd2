"""Outbound HTTP to URLs that users set (tenant webhooks today): refused for internal destinations.

A tenant admin who can set a URL that the workers POST to can otherwise make them reach anything the
workers can: loopback services (Redis, the Ray dashboard), the private network, cloud metadata
(169.254.169.254, fd00:ec2::254). So every outbound call to a user-set URL goes through here:

- the host is resolved, and every address it resolves to must be public (not loopback, link-local,
  private, shared, unspecified, multicast, reserved or a known metadata address; IPv4 inside IPv6,
  as in ``::ffff:127.0.0.1``, is checked as the IPv4 it carries);
- the connection goes to the address that was checked, never to a second lookup of the name, so a
  DNS answer that changes between the check and the connection (rebinding) cannot win; TLS still
  verifies the certificate against the name;
- each redirect is checked the same way before it is followed.

The platform admin may allow destinations explicitly (``OUTBOUND_ALLOWED_DESTINATIONS``: host names,
``host:port``, addresses or CIDR networks). No app is imported here: the future ``notify`` app uses
the same module. Save-time checks (``url_check``) give users a clear error early; the send path
checks again because DNS answers change.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

SCHEMES = {"http": 80, "https": 443}
MAX_REDIRECTS = 3
MAX_BODY_BYTES = 64 * 1024
# Metadata services that some clouds put at addresses the generic checks would not all catch.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
# IPv6 prefixes that carry an IPv4 address a router would reach: NAT64 (64:ff9b::/96).
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutboundRefused(ValueError):
    """A URL a user set may not be called: its scheme, its host or where it resolves to."""


@dataclass(frozen=True)
class _Allowed:
    host: str | None = None
    port: int | None = None
    network: IPNetwork | None = None


@dataclass(frozen=True)
class OutboundPolicy:
    """Destinations the platform admin allowed although they are not public."""

    allowed: tuple[_Allowed, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> OutboundPolicy:
        """``hooks.internal``, ``hooks.internal:8443``, ``10.1.2.3``, ``[fd00::1]:80``, ``10.0.0.0/8``."""
        allowed = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            if "/" in entry:
                allowed.append(_Allowed(network=ipaddress.ip_network(entry, strict=False)))
                continue
            host, port = entry, None
            if entry.startswith("["):
                host, _, rest = entry[1:].partition("]")
                port = int(rest[1:]) if rest.startswith(":") else None
            elif entry.count(":") == 1:
                host, _, p = entry.partition(":")
                port = int(p)
            allowed.append(_Allowed(host=host, port=port))
        return cls(allowed=tuple(allowed))

    def allows(self, *, host: str, address: IPAddress, port: int) -> bool:
        for a in self.allowed:
            if a.network is not None and _unwrap(address) in a.network:
                return True
            if a.host in (host, str(address)) and a.port in (None, port):
                return True
        return False


def outbound_policy() -> OutboundPolicy:
    """The policy in force: this installation's ``OUTBOUND_ALLOWED_DESTINATIONS``."""
    return OutboundPolicy.from_entries(getattr(settings, "OUTBOUND_ALLOWED_DESTINATIONS", []))


def _unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def address_refusal(address: IPAddress) -> str | None:
    """Why an address is internal (a short phrase), or None when it is public."""
    for a in dict.fromkeys((_unwrap(address), address)):
        if a in METADATA_ADDRESSES:
            return "a cloud metadata address"
        for prop, why in (
            ("is_unspecified", "an unspecified address"),
            ("is_loopback", "a loopback address"),
            ("is_link_local", "a link-local address"),
            ("is_multicast", "a multicast address"),
            ("is_private", "a private address"),
            ("is_reserved", "a reserved address"),
        ):
            if getattr(a, prop):
                return why
        if not a.is_global:
            return "not a public address"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (what a plain connect would use)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


@dataclass(frozen=True)
class Destination:
    """A checked URL: where to connect (the checked addresses) and what to ask for there."""

    scheme: str
    host: str
    port: int
    addresses: tuple[IPAddress, ...]
    path: str
    host_header: str


def url_check(
    url: str,
    *,
    policy: OutboundPolicy | None = None,
    resolver: Resolver | None = None,
    unresolved_ok: bool = False,
) -> Destination:
    """Resolve ``url``'s host and refuse it unless every address is public or allowed.

    ``unresolved_ok``: a name that does not resolve now passes with no addresses (a save-time check
    on a host whose DNS is not set up yet); the send path always calls without it.
    """
    policy = policy if policy is not None else outbound_policy()
    resolver = resolver or system_resolver
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise OutboundRefused("only http(s) URLs are allowed")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise OutboundRefused("the URL has no host")
    port = port or SCHEMES[scheme]
    try:
        raw_addresses = resolver(host, port)
    except (OSError, UnicodeError) as exc:
        if not unresolved_ok:
            raise OutboundRefused(f"the host {host!r} does not resolve") from exc
        raw_addresses = []
    addresses = []
    for raw in raw_addresses:
        address = ipaddress.ip_address(raw.split("%", 1)[0])
        why = address_refusal(address)
        if why and not policy.allows(host=host, address=address, port=port):
            shown = host if host == str(address) else f"{host} ({address})"
            raise OutboundRefused(
                f"{shown} is {why}; a platform admin may allow it in OUTBOUND_ALLOWED_DESTINATIONS"
            )
        addresses.append(address)
    if not addresses and not unresolved_ok:
        raise OutboundRefused(f"the host {host!r} does not resolve")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    default = port == SCHEMES[scheme]
    name = f"[{host}]" if ":" in host else host
    return Destination(
        scheme=scheme,
        host=host,
        port=port,
        addresses=tuple(addresses),
        path=path,
        host_header=name if default else f"{name}:{port}",
    )


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address, whatever the name resolves to now."""

    def __init__(self, *args, address: IPAddress, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._address = str(address)

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """The same over TLS; the certificate is verified against the URL's host name."""

    def __init__(self, *args, address: IPAddress, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._address = str(address)

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    url: str
    body: bytes


def _send(dest: Destination, method: str, body: bytes | None, headers: dict, timeout: float):
    last: OSError | None = None
    for address in dest.addresses:
        if dest.scheme == "https":
            conn = _PinnedHTTPSConnection(
                dest.host, dest.port, address=address, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            conn = _PinnedHTTPConnection(dest.host, dest.port, address=address, timeout=timeout)
        try:
            conn.request(method, dest.path, body=body, headers={**headers, "Host": dest.host_header})
            resp = conn.getresponse()
            return resp, resp.read(MAX_BODY_BYTES), conn
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            # A broken answer (bad status line, cut off) counts as unreachable, like a refused connect.
            last = exc if isinstance(exc, OSError) else OSError(f"{type(exc).__name__}: {exc}")
    raise last or OSError("no address to connect to")


def outbound_request(
    url: str,
    *,
    method: str = "POST",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
    policy: OutboundPolicy | None = None,
    resolver: Resolver | None = None,
) -> OutboundResponse:
    """Send one request to a user-set URL, following up to ``MAX_REDIRECTS`` redirects, each one
    checked before it is followed. Raises ``OutboundRefused`` for a refused destination and
    ``OSError`` (timeouts included) when it cannot be reached."""
    headers = dict(headers or {})
    for _ in range(MAX_REDIRECTS + 1):
        dest = url_check(url, policy=policy, resolver=resolver)
        resp, data, conn = _send(dest, method, body, headers, timeout)
        conn.close()
        location = resp.getheader("Location")
        if resp.status not in (301, 302, 303, 307, 308) or not location:
            return OutboundResponse(status=resp.status, url=url, body=data)
        url = urljoin(url, location)
        if resp.status not in (307, 308):
            # What browsers and urllib do: the redirected request is a GET without the body.
            method, body = "GET", None
            headers.pop("Content-Type", None)
    raise OutboundRefused(f"more than {MAX_REDIRECTS} redirects")
