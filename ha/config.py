"""The HA service's settings (docs/ha-protocol.md §13), plus this broker's controller id."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HAConfig:
    """The HA settings of `broker.conf` (docs/ha-protocol.md §13), plus this broker's controller
    id."""

    broker_id: int
    ha_listen_port: int = 10912
    bind_address: str = "0.0.0.0"  # noqa: S104 - Java listens on every interface
    ha_send_heartbeat_interval_ms: int = 5_000
    ha_housekeeping_interval_ms: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_max_time_slave_not_catchup_ms: int = 15_000
    check_sync_state_set_period_ms: int = 5_000
    all_ack_in_sync_state_set: bool = True
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    slave_timeout_ms: int = 3_000
    sync_from_last_file: bool = False
    async_learner: bool = False
    reconnect_interval_ms: int = 1_000  # Java: 5 s
