"""`local_address()`: the address this host shows the network, as a client id or broker IP."""

from __future__ import annotations

import socket


def local_address() -> str:
    """The host's outward IPv4 address (Java `NetworkUtil.getLocalAddress`), or 127.0.0.1.

    Connecting a UDP socket sends nothing; it only asks the kernel which source address a
    packet to a non-local destination would use.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            address: str = probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return address
