"""A BORNHOST or STOREHOST as stored (IPv4 or IPv6 address, and port), and the offsetMsgId made
of the store host and a physical offset (`MessageDecoder.createMessageId`, docs/store-format.md
§3.1).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

_PORT: Final = struct.Struct(">i")
_PHY_OFFSET: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class HostPort:
    """A BORNHOST or STOREHOST: IPv4 (4 bytes) or IPv6 (16 bytes) address and a port."""

    ip: bytes
    port: int
    # The field as stored: ip, then port as a big-endian i32 (8 or 20 bytes).
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.ip) not in (4, 16):
            raise ValueError(f"host ip must be 4 or 16 bytes, got {len(self.ip)}")
        if not 0 <= self.port <= 0xFFFF:
            raise ValueError(f"host port {self.port} is outside [0, 65535]")
        object.__setattr__(self, "packed", bytes(self.ip) + _PORT.pack(self.port))

    @classmethod
    def from_str(cls, address: str) -> HostPort:
        """Parse `"127.0.0.1:10911"` or `"[::1]:10911"`; raises ValueError.

        An IPv4-mapped IPv6 address (`[::ffff:1.2.3.4]`, what a dual-stack socket reports) becomes
        IPv4, as Java's `InetAddress` does, so such a producer gets an IPv4 BORNHOST.
        """
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"host address {address!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return cls(ip.packed, int(port))

    @property
    def is_v6(self) -> bool:
        return len(self.ip) == 16

    def __str__(self) -> str:
        ip = ipaddress.ip_address(self.ip)
        return f"[{ip}]:{self.port}" if self.is_v6 else f"{ip}:{self.port}"


def offset_msg_id(store_host: HostPort, phy_offset: int) -> str:
    """The offsetMsgId of §3.1: hex of STOREHOST ip + port (i32) + PHYSICALOFFSET (i64), upper case.

    32 chars for an IPv4 store host, 56 for IPv6.
    """
    return (store_host.packed + _PHY_OFFSET.pack(phy_offset)).hex().upper()


def offset_msg_ids(store_host: HostPort, phy_offsets: Sequence[int]) -> str:
    """A batch's msgId: the offsetMsgId of each record (offsets >= 0), comma-separated.

    The ids' bytes laid out with numpy and turned to hex in one call, the separator put in by
    `bytes.hex`: a third of the cost of formatting each id (a send's batch has dozens)."""
    packed = store_host.packed
    ids = np.empty(len(phy_offsets), dtype=[("host", f"V{len(packed)}"), ("offset", ">u8")])
    ids["host"] = packed
    ids["offset"] = phy_offsets
    return ids.tobytes().hex(",", ids.itemsize).upper()
