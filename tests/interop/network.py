"""Loopback ports for servers, and the one name-server request the harness makes itself.

A server's port is picked at random below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range) and checked free. Not from that range (binding to port
0): a server restarted on its old port (a killed broker on its store) found it taken in
between as the source port of some outgoing connection ("Address already in use" for a Java
broker's HA port in a clean-clone run, 2026-11-28), for as long as that connection lives. A broker
listens on a block: listenPort - 2 (fast remoting, "VIP channel"), listenPort, and
listenPort + 1 (HA); `free_broker_port` checks all of them.
"""

from __future__ import annotations

import json
import random
import socket
import struct
from pathlib import Path
from typing import Final

GET_BROKER_CLUSTER_INFO: Final = 106  # RequestCode.GET_BROKER_CLUSTER_INFO
REMOTING_FRAME_BYTES_MAX: Final = 16 * 1024 * 1024


class NetworkError(Exception):
    """No free port block, or the name server answered something unexpected."""


# Server ports are drawn from [LISTEN_PORT_LOW, the ephemeral range's start - 2).
LISTEN_PORT_LOW: Final = 10_000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _listen_ports() -> range:
    """Ports no outgoing connection takes: below the kernel's ephemeral range."""
    ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    if ephemeral_low - 2 <= LISTEN_PORT_LOW + 1_000:
        raise NetworkError(f"the ephemeral range starts at {ephemeral_low}: no room below it")
    return range(LISTEN_PORT_LOW, ephemeral_low - 2)


def free_port(*, attempts: int = 50) -> int:
    """A TCP port on 127.0.0.1, below the ephemeral range, that was free a moment ago."""
    return _free_block((0,), attempts)


def free_broker_port(*, attempts: int = 50) -> int:
    """A listenPort p with p - 2 (fast remoting), p - 1 and p + 1 (HA) free as well."""
    return _free_block((-2, -1, 0, 1), attempts)


def _free_block(offsets: tuple[int, ...], attempts: int) -> int:
    ports = _listen_ports()
    for _ in range(attempts):
        port = random.randrange(ports.start + 2, ports.stop)
        if all(_port_is_free(port + offset) for offset in offsets):
            return port
    raise NetworkError(f"no block of {len(offsets)} free ports found in {attempts} attempts")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def port_accepts(addr: str) -> bool:
    """Whether a TCP connection to "host:port" succeeds within a second."""
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def namesrv_cluster_info(namesrv: str, *, timeout_s: float = 3.0) -> str:
    """The name server's GET_BROKER_CLUSTER_INFO body (fastjson text), over one raw request.

    Remoting frame (JSON header), big-endian:
        | length i32 | serialize_type u8, header_length u24 | header | body |
    Used to wait for a broker's registration without starting an mqadmin JVM.
    """
    header = json.dumps(
        {
            "code": GET_BROKER_CLUSTER_INFO,
            "flag": 0,
            "language": "JAVA",
            "opaque": 1,
            "serializeTypeCurrentRPC": "JSON",
            "version": 0,
            "extFields": {},
        }
    ).encode()
    host, port = namesrv.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
        (length,) = struct.unpack(">i", _recv_exactly(sock, 4))
        if not 4 <= length <= REMOTING_FRAME_BYTES_MAX:
            raise NetworkError(f"name server {namesrv}: frame length={length} out of range")
        frame = _recv_exactly(sock, length)
    (type_and_length,) = struct.unpack_from(">i", frame)
    header_length = type_and_length & 0xFFFFFF
    response = json.loads(frame[4 : 4 + header_length])
    if response.get("code") != 0:
        raise NetworkError(f"name server {namesrv}: GET_BROKER_CLUSTER_INFO -> {response}")
    return frame[4 + header_length :].decode()


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = sock.recv(min(size, 65536))
        if not chunk:
            raise NetworkError("connection closed mid-frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
