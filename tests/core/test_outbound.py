"""The outbound URL guard (core.outbound), as a tenant admin who sets a webhook URL would attack it:
literal internal addresses in every spelling the system resolver accepts, names that resolve to
loopback, a redirect from an allowed server to an internal one, and DNS answers that change between
the check and the connection. Real HTTP servers on loopback; the platform admin's allowlist lets
one of them count as allowed."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.outbound import OutboundPolicy, OutboundRefused, outbound_request, url_check

NOTHING_ALLOWED = OutboundPolicy()


class Server:
    """A loopback HTTP server: answers 200, or redirects every request to ``redirect_to``."""

    def __init__(self, *, redirect_to: str | None = None, status: int = 307) -> None:
        self.calls: list[tuple[str, str, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                outer.calls.append((self.command, self.path, self.rfile.read(n)))
                if outer.redirect_to and self.path != "/final":
                    self.send_response(status)
                    self.send_header("Location", outer.redirect_to)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args):
                pass

        self.redirect_to = redirect_to
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    started: list[Server] = []

    def start(**kwargs) -> Server:
        started.append(Server(**kwargs))
        return started[-1]

    yield start
    for s in started:
        s.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:6379/",  # Redis
        "http://[::1]:8265/",  # the Ray dashboard over IPv6 loopback
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",  # shared address space (carrier NAT)
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://[fd00:ec2::254]/latest/meta-data/",  # AWS metadata over IPv6
        "http://100.100.100.200/",  # Alibaba metadata
        "http://[fe80::1]/",
        "http://0.0.0.0:8000/",
        "http://[::]/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://255.255.255.255/",
        # Spellings of 127.0.0.1 that the system resolver (inet_aton) accepts:
        "http://2130706433/",
        "http://017700000001/",
        "http://0x7f000001/",
        "http://127.1/",
        "http://0177.0.0.1/",
        # IPv4 inside IPv6:
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "https://user:pass@127.0.0.1:443/",
    ],
)
def test_literal_internal_addresses_are_refused(url):
    with pytest.raises(OutboundRefused):
        url_check(url, policy=NOTHING_ALLOWED)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "file:///etc/passwd", "gopher://127.0.0.1:6379/_", "http:///x"]
)
def test_other_schemes_and_hostless_urls_are_refused(url):
    with pytest.raises(OutboundRefused):
        url_check(url, policy=NOTHING_ALLOWED)


@pytest.mark.parametrize(
    "url,address,host_header",
    [
        ("http://93.184.215.14/hook", "93.184.215.14", "93.184.215.14"),
        ("https://[2606:4700:4700::1111]/x", "2606:4700:4700::1111", "[2606:4700:4700::1111]"),
        ("http://8.8.8.8:8080/", "8.8.8.8", "8.8.8.8:8080"),
    ],
)
def test_public_addresses_pass(url, address, host_header):
    dest = url_check(url, policy=NOTHING_ALLOWED)
    assert [str(a) for a in dest.addresses] == [address] and dest.host_header == host_header


def test_a_name_that_resolves_to_loopback_is_refused():
    with pytest.raises(OutboundRefused, match="loopback"):
        url_check("http://localhost:6379/", policy=NOTHING_ALLOWED)
    with pytest.raises(OutboundRefused, match="metadata"):
        url_check(
            "http://hooks.attacker.test/", policy=NOTHING_ALLOWED, resolver=lambda h, p: ["169.254.169.254"]
        )


def test_one_internal_answer_among_public_ones_is_enough_to_refuse():
    with pytest.raises(OutboundRefused, match="private"):
        url_check(
            "http://hooks.attacker.test/",
            policy=NOTHING_ALLOWED,
            resolver=lambda h, p: ["8.8.8.8", "10.0.0.5"],
        )


def test_the_send_path_refuses_before_connecting(servers):
    server = servers()
    with pytest.raises(OutboundRefused):
        outbound_request(server.url, body=b"{}", policy=NOTHING_ALLOWED)
    assert server.calls == []


def test_the_platform_admin_may_allow_a_destination_exactly(servers):
    server = servers()
    allowed = OutboundPolicy.from_entries([f"127.0.0.1:{server.port}"])
    assert outbound_request(server.url, body=b"{}", policy=allowed).status == 200
    assert server.calls == [("POST", "/hook", b"{}")]
    # The allowance names one port: the same host's other services stay out of reach.
    with pytest.raises(OutboundRefused):
        url_check("http://127.0.0.1:6379/", policy=allowed)
    # CIDR entries allow a network.
    assert url_check("http://10.9.8.7/", policy=OutboundPolicy.from_entries(["10.0.0.0/8"])).addresses


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_from_an_allowed_server_to_loopback_is_refused(servers, status):
    internal = servers()
    for target in (
        internal.url,
        f"http://localhost:{internal.port}/hook",
        f"http://2130706433:{internal.port}/",
    ):
        front = servers(redirect_to=target, status=status)
        allowed = OutboundPolicy.from_entries([f"127.0.0.1:{front.port}"])
        with pytest.raises(OutboundRefused):
            outbound_request(front.url, body=b"{}", policy=allowed)
        assert len(front.calls) == 1  # the allowed server was asked...
    assert internal.calls == []  # ...and the internal one never was


def test_a_redirect_within_the_allowed_destination_is_followed(servers):
    front = servers(redirect_to="/final", status=307)
    allowed = OutboundPolicy.from_entries([f"127.0.0.1:{front.port}"])
    assert outbound_request(front.url, body=b"{}", policy=allowed).status == 200
    assert [(c[0], c[1]) for c in front.calls] == [("POST", "/hook"), ("POST", "/final")]


def test_the_connection_goes_to_the_checked_address_not_a_second_lookup(servers):
    """DNS rebinding: the name resolves to an allowed address when checked and to the metadata
    service afterwards. The request still reaches the checked address, and the name is looked up
    once, so the second answer is never used."""
    server = servers()
    answers = iter([["127.0.0.1"], ["169.254.169.254"], ["169.254.169.254"]])
    lookups: list[str] = []

    def rebinding(host, port):
        lookups.append(host)
        return next(answers)

    allowed = OutboundPolicy.from_entries([f"127.0.0.1:{server.port}"])
    resp = outbound_request(
        f"http://rebind.test:{server.port}/hook", body=b"{}", policy=allowed, resolver=rebinding
    )
    assert resp.status == 200 and len(server.calls) == 1 and lookups == ["rebind.test"]
