"""GET_BROKER_EPOCH_CACHE's body carries the store's own `EpochEntry` (one type for the fact)."""

from __future__ import annotations

import pytest

from controller.messages import EpochEntryCache
from remoting.errors import BodyDecodeError
from store.epoch_cache import LONG_MAX, EpochEntry

# What a Java broker answers (fastjson, sorted keys): two epochs, the last one open-ended.
JAVA_BODY = (
    b'{"brokerId":0,"brokerName":"broker-a","clusterName":"DefaultCluster","epochList":['
    b'{"endOffset":100,"epoch":1,"startOffset":0},'
    b'{"endOffset":9223372036854775807,"epoch":2,"startOffset":100}],"maxOffset":250}'
)


def test_java_body_decodes_to_store_epoch_entries_and_encodes_back() -> None:
    cache = EpochEntryCache.decode(JAVA_BODY)
    assert cache.epoch_list == (EpochEntry(1, 0, 100), EpochEntry(2, 100, LONG_MAX))
    assert (cache.cluster_name, cache.broker_name, cache.broker_id, cache.max_offset) == (
        "DefaultCluster", "broker-a", 0, 250)
    assert cache.encode() == JAVA_BODY


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(b'{"endOffset":5,"epoch":1,"startOffset":9}', id="end-before-start"),
        pytest.param(b'{"endOffset":5,"epoch":-1,"startOffset":0}', id="negative-epoch"),
        pytest.param(b'{"endOffset":5,"epoch":1,"startOffset":-3}', id="negative-start"),
    ],
)
def test_an_entry_no_epoch_can_hold_is_a_body_decode_error(entry: bytes) -> None:
    body = b'{"brokerId":0,"brokerName":"b","clusterName":"c","epochList":[%b],"maxOffset":0}'
    with pytest.raises(BodyDecodeError, match=r"epochList\[0\]"):
        EpochEntryCache.decode(body % entry)
