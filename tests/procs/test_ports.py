"""``procs.free_ports``: the ports a caller starts several listeners on are distinct and bindable."""

from __future__ import annotations

import socket

from procs import free_port, free_ports


def test_ports_asked_for_together_are_distinct_and_free():
    # Picked one at a time, two ports can repeat (a Ray head refused to start on such a pair);
    # picked together, they cannot, however often the kernel would hand the same one out again.
    for _ in range(200):
        ports = free_ports(5)
        assert len(set(ports)) == 5
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", ports[0]))
        b.bind(("127.0.0.1", ports[1]))
    assert 0 < free_port() < 65536
