"""A pyrmq slave of a Java master holds records without the `__CRC32#` property (Java's
enabledAppendPropCRC defaults to false). Promoted (changeToMaster), it must keep them all.

With `forceVerifyPropCRC=false` (Java's default) it does. With pyrmq's default (true) the
first Java record fails the check ("no __CRC32# property in the last 20 bytes of PROPERTIES");
the promotion's cut of a partial tail then once cut the whole replicated log back to 0,
acknowledged messages included (found by tests/interop/test_mixed_ha_group.py: a Java master
killed, the pyrmq slave elected, its log cut from 295453 bytes to 0). Now a record below the
confirm offset that fails its check (rather than ending past the written bytes) makes the
promotion refuse with DataInvariantError naming the record and the setting: the broker stops
instead of losing acknowledged messages. A mixed set runs with forceVerifyPropCRC=false on the
pyrmq brokers (tests/interop/test_mixed_ha_group.py) or enabledAppendPropCRC=true on the Java
ones. Java with forceVerifyPropCRC=true also takes such a record as invalid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import DataInvariantError
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from tests.support.store_helpers import BORN_HOST, STORE_HOST, small_config

COUNT = 50


async def java_style_log(root: Path) -> bytes:
    """A master's commitlog as Java writes it by default: no __CRC32# property."""
    master = MessageStore(small_config(root, force_verify_prop_crc=False))
    master.open()
    try:
        for i in range(COUNT):
            await master.put_message(prepare_message(
                topic="TopicTest", queue_id=0, flag=0, body=f"java-{i}".encode() * 20,
                properties=encode_properties({"TAGS": "TagA", "KEYS": f"key-{i}"}), sys_flag=0,
                born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST,
                max_message_size=4 * 1024 * 1024, append_prop_crc=False))
        end = master.commitlog.max_phy_offset
        mapped = master.commitlog.files.find(0)
        assert mapped is not None
        return bytes(mapped.buf[:end])
    finally:
        master.close()


async def promoted_start(tmp_path: Path, *, force_verify_prop_crc: bool) -> tuple[int, int]:
    """Replicate the Java-style log to a slave (all of it confirmed, as when every member
    acked it), promote it; (log end, epoch start offset)."""
    data = await java_style_log(tmp_path / "master")
    slave = MessageStore(small_config(tmp_path / "slave", enable_controller_mode=True,
                                      force_verify_prop_crc=force_verify_prop_crc))
    slave.open()
    try:
        slave.fenced = True
        slave.append_replicated(0, data)
        slave.set_confirm_offset(len(data))
        return len(data), slave.become_master_blocking(2)
    finally:
        slave.close()


async def test_a_promoted_slave_keeps_java_records_without_forced_prop_crc(
    tmp_path: Path,
) -> None:
    end, start = await promoted_start(tmp_path, force_verify_prop_crc=False)
    assert start == end > 0


async def test_with_forced_prop_crc_a_promotion_refuses_rather_than_cut_confirmed_records(
    tmp_path: Path,
) -> None:
    with pytest.raises(DataInvariantError, match=r"record at 0, below the confirm offset .*"
                       r"forceVerifyPropCRC=false"):
        await promoted_start(tmp_path, force_verify_prop_crc=True)
