"""Store settings: the `MessageStoreConfig` keys of broker.conf, as typed snake_case fields.

Defaults are RocketMQ's (docs/store-format.md §11) except where pyrmq is deliberately stricter:
the whole-record CRC (`__CRC32#`) is always written and verified (docs/reliability.md M13).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from store.schedule import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level

COMMITLOG_FILE_SIZE_DEFAULT: Final = 1024 * 1024 * 1024
CQ_UNIT_SIZE: Final = 20
CQ_FILE_SIZE_DEFAULT: Final = 300_000 * CQ_UNIT_SIZE
MAX_MESSAGE_SIZE_DEFAULT: Final = 4 * 1024 * 1024


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Everything the store needs to know. `BrokerConfig.store` embeds it: broker.conf's
    MessageStoreConfig keys (broker/config.py, `KEYS` with `store=True`) set these fields."""

    store_path_root_dir: Path
    mapped_file_size_commit_log: int = COMMITLOG_FILE_SIZE_DEFAULT
    mapped_file_size_consume_queue: int = CQ_FILE_SIZE_DEFAULT
    max_message_size: int = MAX_MESSAGE_SIZE_DEFAULT
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    checkpoint_flush_interval_ms: int = 1000
    # Retention: delete files older than file_reserved_time_h at the hours of delete_when
    # ("04", or "01;04"), or at any time when disk use exceeds disk_max_used_space_ratio %.
    # Whole hours, as Java's `int fileReservedTime`.
    file_reserved_time_h: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    clean_resource_interval_ms: int = 10_000
    # The broker refuses writes at this disk use (RocketMQ diskSpaceWarningLevelRatio).
    disk_space_warning_level_ratio: int = 90
    # pyrmq always writes and verifies the whole-record CRC property; the flags exist so the
    # codec can also produce and read Java's default (body CRC only) records in tests.
    enabled_append_prop_crc: bool = True
    check_crc_on_recover: bool = True
    force_verify_prop_crc: bool = True
    # Controller mode: dispatch to consume queues stops at confirm_offset.
    enable_controller_mode: bool = False
    read_uncommitted: bool = False
    # The delay of each delay level (store/schedule.py): 18 levels, 1 s to 2 h, by default.
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_message_delay_level(self.message_delay_level)  # raises DelayLevelError (a ValueError)
        if self.mapped_file_size_commit_log < 4096 or self.mapped_file_size_commit_log % 4096:
            raise ValueError(
                f"mapped_file_size_commit_log={self.mapped_file_size_commit_log} "
                "must be a positive multiple of 4096"
            )
        if self.mapped_file_size_consume_queue % CQ_UNIT_SIZE:
            raise ValueError(
                f"mapped_file_size_consume_queue={self.mapped_file_size_consume_queue} "
                f"must be a multiple of {CQ_UNIT_SIZE}"
            )

    @property
    def commitlog_dir(self) -> Path:
        return self.store_path_root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"
