"""Which HA peers a controller-mode master accepts (docs/reliability.md M16): the pure check.

A slave's HA handshake names its controller broker id. The master accepts it only when
- the id is one the controller has registered for this broker set (GET_SYNC_STATE_DATA lists
  every registered id with its address, in or out of the SyncStateSet) and is not its own, and
- the connection comes from the host of the address the controller registered for that id
  (the broker's `brokerIP1`), unless `pyrmqHaCheckPeerAddress=false` (for hosts whose HA
  traffic leaves from another interface than brokerIP1).
Java checks neither: any process that reaches the HA port can handshake with any id and be
counted as an in-sync replica.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

CHECK_ADDRESS_KEY = "pyrmqHaCheckPeerAddress"


def _host(address: str) -> str:
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


def ha_peer_refusal(broker_id: int, peer: str, *, own_id: int | None,
                    members: Mapping[int, str] | None, check_address: bool) -> str | None:
    """Why the handshake of `broker_id` from `peer` (`ip:port`) is refused, or None.
    `members`: the controller's registered ids and their remoting addresses (None: not known
    yet)."""
    if members is None:
        return (f"slave_broker_id={broker_id} from {peer}: the controller's member list is not "
                "known yet")
    if broker_id == own_id:
        return f"slave_broker_id={broker_id} from {peer} is this broker's own id"
    registered = members.get(broker_id)
    if registered is None:
        return (f"slave_broker_id={broker_id} from {peer} is not registered with the "
                f"controller (members {sorted(members)})")
    if check_address and _host(peer) != _host(registered):
        return (f"slave_broker_id={broker_id} from {peer}: the controller registered it at "
                f"{registered} (set {CHECK_ADDRESS_KEY}=false if its HA traffic leaves "
                "from another address)")
    return None
