"""Which clients may send the controller's admin requests (docs/reliability.md M16).

`pyrmqAdminAllowlist` (controller.conf; IP addresses and networks, comma-separated) names the
clients whose admin requests the controller serves; a request of another client is answered
NO_PERMISSION (16) and changes nothing. Unset (the default, as in Java), anyone may send them.

Admin requests are the operator's, which brokers never send:
- CONTROLLER_ELECT_MASTER with `designateElect=true` (mqadmin electMaster). A broker's own
  election request (`designateElect=false`, docs/replicas-manager.md §4.5) stays open: the
  controller's election policy, not the caller, decides its outcome;
- CLEAN_BROKER_DATA (mqadmin cleanBrokerMetadata);
- GET_CONTROLLER_CONFIG (mqadmin getControllerConfig: the controller's paths and settings).
Everything a broker sends (registration, heartbeats, replica info, SyncStateSet changes) and
the reads of GET_METADATA_INFO and GET_SYNC_STATE_DATA are not admin requests.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Final

from remoting.codes import RequestCode

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ADMIN_CODES: Final = frozenset({
    RequestCode.CONTROLLER_ELECT_MASTER,  # only with designateElect=true
    RequestCode.CLEAN_BROKER_DATA,
    RequestCode.GET_CONTROLLER_CONFIG,
})


def parse_allowlist(text: str) -> tuple[IPNetwork, ...]:
    """`127.0.0.1, 10.0.0.0/8, ::1` as networks; ValueError naming a bad entry."""
    networks = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as err:
            raise ValueError(f"has {part!r}, not an IP address or network") from err
    if not networks:
        raise ValueError("names no address")
    return tuple(networks)


def is_admin_request(code: int, ext_fields: Mapping[str, str]) -> bool:
    if code == RequestCode.CONTROLLER_ELECT_MASTER:
        return ext_fields.get("designateElect", "false").strip().lower() == "true"
    return code in ADMIN_CODES


def admin_refusal(code: int, ext_fields: Mapping[str, str], peer: str,
                  allowlist: tuple[IPNetwork, ...] | None) -> str | None:
    """Why this request must be refused (the remark of NO_PERMISSION), or None. `peer` is the
    client's `ip:port`; `allowlist` None allows everyone."""
    if allowlist is None or not is_admin_request(code, ext_fields):
        return None
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in allowlist):
            return None
    try:
        name = RequestCode(code).name
    except ValueError:
        name = str(code)
    return (f"{name} from {host} refused: admin requests are allowed only from "
            "pyrmqAdminAllowlist")
