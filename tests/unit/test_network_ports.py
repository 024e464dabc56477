"""tests/interop/network.py: server ports come from below the kernel's ephemeral range."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.interop.network import LISTEN_PORT_LOW, free_broker_port, free_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_server_port_is_one_no_outgoing_connection_takes() -> None:
    # A broker restarted on its port found it taken as the source port of some connection
    # when ports came from the ephemeral range: now they never do.
    for _ in range(20):
        port = free_port()
        assert LISTEN_PORT_LOW <= port < _ephemeral_low()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
        broker = free_broker_port()
        assert broker - 2 >= LISTEN_PORT_LOW
        assert broker + 1 < _ephemeral_low()
        for offset in (-2, -1, 0, 1):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", broker + offset))


def test_outgoing_connections_take_ports_of_the_ephemeral_range() -> None:
    # The premise: the kernel gives a connection's source port from that range.
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            assert client.getsockname()[1] >= _ephemeral_low()
