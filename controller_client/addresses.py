"""Where the controllers are: `controllerAddr` as a list, or, with
`fetchControllerAddrByDnsLookup=true`, one `domain:port` resolved to every A record of the
domain (docs/replicas-manager.md §2-§3).

Java (`BrokerOuterAPI.dnsLookupAddressByDomain`) resolves the domain every 120 s and keeps the
last list when a lookup finds nothing. pyrmq does the same once running; at start, a name that
does not resolve is refused with `ControllerAddressLookupError` (a typo in `controllerAddr`
stops the broker with one line, instead of a broker that waits, fenced, forever).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

from controller_client.errors import ControllerAddressLookupError

DNS_REFRESH_MS: Final = 120_000
"""Java's fixed period of the controller list refresh (`updateControllerAddr`)."""

GetAddrInfo: TypeAlias = Callable[..., Awaitable[list[tuple[Any, ...]]]]


def parse_controller_addrs(controller_addr: str) -> tuple[str, ...]:
    """`controllerAddr` (`"ip:port;ip:port"`) as addresses, blanks dropped."""
    return tuple(part.strip() for part in controller_addr.split(";") if part.strip())


def split_domain(controller_addr: str) -> tuple[str, int]:
    """`domain:port` of a DNS-looked-up `controllerAddr`; ControllerAddressLookupError if it is
    not one name and one port."""
    text = controller_addr.strip()
    domain, sep, port = text.rpartition(":")
    if not sep or not domain or ";" in text or not port.isdigit() or not 0 < int(port) < 65536:
        raise ControllerAddressLookupError(
            f"controllerAddr={controller_addr!r}: with fetchControllerAddrByDnsLookup=true it "
            "must be one domain:port, e.g. controller.example:9878")
    return domain, int(port)


async def lookup_controller_addrs(controller_addr: str, *,
                                  getaddrinfo: GetAddrInfo | None = None) -> tuple[str, ...]:
    """Every IPv4 address (A record) of the domain, each with the port, in the resolver's
    order, without repeats. ControllerAddressLookupError if the name does not resolve."""
    domain, port = split_domain(controller_addr)
    resolve = getaddrinfo or asyncio.get_running_loop().getaddrinfo
    try:
        infos = await resolve(domain, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise ControllerAddressLookupError(
            f"controllerAddr={controller_addr!r}: {domain} does not resolve: {err}") from err
    addrs = tuple(dict.fromkeys(f"{info[4][0]}:{port}" for info in infos))
    if not addrs:
        raise ControllerAddressLookupError(
            f"controllerAddr={controller_addr!r}: {domain} has no A record")
    return addrs


async def controller_addrs(controller_addr: str, *, dns_lookup: bool,
                           getaddrinfo: GetAddrInfo | None = None) -> tuple[str, ...]:
    """The controllers' addresses now: looked up (dns_lookup) or as configured."""
    if dns_lookup:
        return await lookup_controller_addrs(controller_addr, getaddrinfo=getaddrinfo)
    return parse_controller_addrs(controller_addr)
