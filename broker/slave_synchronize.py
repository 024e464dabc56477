"""Slave metadata sync (`SlaveSynchronize`): a slave copies its master's topic configs,
subscription groups, consumer offsets and delay offsets, so that once elected it serves every
topic and every group's progress (docs/reliability.md M11, RocketMQ #9804; docs/remoting-protocol.md
§10).

Pure core (no I/O, tested with tables and hypothesis):
- `next_page_step` decides the 5.5.0 paging loop of GET_ALL_TOPIC_CONFIG (21) and
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): a response without a total ends the loop (a 5.3.3
  master answers everything at once); a page whose `dataVersion` differs from the first
  page's restarts from 0; the loop ends when the pages hold `total` entries. Java 5.5.0 stops
  at `seq >= total - 1` (one entry short when a page boundary falls there); pyrmq waits for all
  `total`. An empty page before the end, or more than `PAGES_MAX` pages or `RESTARTS_MAX`
  restarts, is a `MetadataSyncError`: a partial table is never applied (applying deletes what
  the master does not list), nor an empty topic or group table (a broker always has its system
  topics and groups).
- `merge_consumer_offsets`: Java's `putAll` per `topic@group` key (the master's queues replace
  the slave's for that key; keys only the slave has are kept).
- `page_bounds` is the master's side (broker/processors/admin.py): where a page starts and ends.

Shell: `SlaveSynchronize.run()` is a task of the node; `set_master(addr)` starts syncing from
`addr` (at once, then every `interval_ms`), `set_master(None)` stops it (on becoming master).
The node builds one (`BrokerNode.slave_synchronize`) and runs it; a fixed role from
`broker.conf` (`pyrmqHaRole=slave`) sets the master, the ReplicasManager will do the same.
Each round (`sync_all`) asks the master's remoting address over one connection (kept between
rounds, dropped on any error); a round that fails changes nothing it had not finished (topics,
groups, offsets and delay offsets are applied one by one, each only when completely fetched)
and is retried at the next interval. Topic configs and subscription groups are replaced when
the master's data version differs (the slave then keeps the master's version, so an unchanged
master costs no write); consumer offsets are merged and persisted when something changed;
delay offsets are replaced. The message request modes (402, POP) and the timer checkpoint
(60/61) are not copied: pyrmq has neither.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from broker.errors import BrokerError
from broker.subscription_groups import SubscriptionGroupConfig
from remoting.bodies import DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import BodyDecodeError, RemotingCommandError, RemotingError
from remoting.fastjson import JSONValue, dump_fastjson, java_int, parse_fastjson
from remoting.headers import (
    GetAllSubscriptionGroupRequestHeader,
    GetAllSubscriptionGroupResponseHeader,
    GetAllTopicConfigRequestHeader,
    GetAllTopicConfigResponseHeader,
)

log = logging.getLogger(__name__)

MAX_PAGE_SIZE_DEFAULT: Final = 2_000  # what a Java 5.5.0 slave asks for (`maxTopicNum`)
PAGES_MAX: Final = 10_000
RESTARTS_MAX: Final = 10
REQUEST_TIMEOUT_MS: Final = 30_000  # Java: 30 s for the paged requests, 3 s for the others
SYNC_TIMEOUT_MS: Final = 60_000  # a whole round (all pages of all tables)


class MetadataSyncError(BrokerError):
    """A sync round cannot complete: the master answered an error, a body that does not
    decode, or pages that do not add up. Nothing of the table concerned was applied."""


# --------------------------------------------------------------------------------------------
# Pure core: the paging loop (slave side) and the page bounds (master side)


class PageStep(enum.Enum):
    NEXT = "next"  # ask for the next page at `cursor.seq`
    RESTART = "restart"  # drop what was gathered and start again at 0 with the new version
    DONE = "done"  # the gathered entries are the whole table


@dataclass(frozen=True, slots=True)
class PageCursor:
    """Where the paging loop is: the next `seq`, the version of the first page, counters."""

    seq: int = 0
    version: DataVersion | None = None
    pages: int = 0
    restarts: int = 0
    gathered: int = 0


def next_page_step(
    cursor: PageCursor, *, received: int, page_version: DataVersion, total: int | None
) -> tuple[PageStep, PageCursor]:
    """The loop's decision after one page of `received` entries (module docstring).

    Raises MetadataSyncError when the pages cannot add up to the table.
    """
    pages = cursor.pages + 1
    if pages > PAGES_MAX:
        raise MetadataSyncError(f"more than {PAGES_MAX} pages")
    if total is None:  # a master without paging: this response is the whole table
        version = page_version if cursor.version is None else cursor.version
        return PageStep.DONE, PageCursor(cursor.seq + received, version, pages,
                                         cursor.restarts, cursor.gathered + received)
    if total < 0:
        raise MetadataSyncError(f"total={total} is negative")
    if cursor.version is not None and page_version != cursor.version:
        restarts = cursor.restarts + 1
        if restarts > RESTARTS_MAX:
            raise MetadataSyncError(f"the master's data version changed {restarts} times "
                                    "during one sync")
        return PageStep.RESTART, PageCursor(0, page_version, pages, restarts, 0)
    seq = cursor.seq + received
    gathered = cursor.gathered + received
    after = PageCursor(seq, page_version, pages, cursor.restarts, gathered)
    if seq >= total:
        return PageStep.DONE, after
    if received == 0:
        raise MetadataSyncError(f"empty page at seq={cursor.seq} of total={total}")
    return PageStep.NEXT, after


def page_bounds(
    total: int, *, seq: int, same_version: bool, page_size: int
) -> tuple[int, int]:
    """The master's page [begin, end) of its name-sorted table (Java's `subTopicConfigTable`):
    from `seq` when the asker's data version is the current one, else from 0; at most
    `page_size` entries, except that a page never leaves exactly one entry for the next page
    (it takes it too): a Java 5.5.0 slave stops at `seq >= total - 1` and would miss it."""
    begin = seq if same_version else 0
    if begin >= total:
        return total, total
    end = min(begin + page_size, total)
    if total - end == 1:
        end = total
    return begin, end


def merge_consumer_offsets(
    local: Mapping[str, Mapping[int, int]], master: Mapping[str, Mapping[int, int]]
) -> dict[str, dict[int, int]] | None:
    """The slave's offset table after Java's `putAll` of the master's (whole queue map per
    `topic@group` key); None when that changes nothing."""
    changed = {key: dict(queues) for key, queues in master.items() if local.get(key) != queues}
    if not changed:
        return None
    merged = {key: dict(queues) for key, queues in local.items()}
    merged.update(changed)
    return merged


# --------------------------------------------------------------------------------------------
# Bodies


def decode_data_version(text: str, what: str) -> DataVersion:
    """A `dataVersion` header value (DataVersion JSON); raises BodyDecodeError."""
    return DataVersion.from_json_value(parse_fastjson(text), what)


def encode_data_version(version: DataVersion) -> str:
    return dump_fastjson(version.to_json_value())


@dataclass(frozen=True, slots=True)
class OffsetsBody:
    """GET_ALL_CONSUMER_OFFSET's body (`ConsumerOffsetSerializeWrapper`)."""

    offset_table: dict[str, dict[int, int]]
    data_version: DataVersion


def decode_offsets_body(body: bytes) -> OffsetsBody:
    """Integer queue keys quoted or not; raises BodyDecodeError naming the path."""
    value = _object(parse_fastjson(body), "consumerOffset")
    table = _object(_or_empty(value.get("offsetTable")), "consumerOffset.offsetTable")
    offsets: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        offsets[key] = _int_map(queues, f"consumerOffset.offsetTable[{key!r}]")
    return OffsetsBody(offsets, DataVersion.from_json_value(
        value.get("dataVersion") or {}, "consumerOffset.dataVersion"))


def decode_delay_offsets_body(body: bytes) -> OffsetsBody:
    """GET_ALL_DELAY_OFFSET's body `{"dataVersion":..,"offsetTable":{1:0,..}}` as one table
    under the key ""."""
    value = _object(parse_fastjson(body), "delayOffset")
    table = _int_map(_or_empty(value.get("offsetTable")), "delayOffset.offsetTable")
    return OffsetsBody({"": table}, DataVersion.from_json_value(
        value.get("dataVersion") or {}, "delayOffset.dataVersion"))


def decode_groups(table: Mapping[str, JSONValue]) -> dict[str, SubscriptionGroupConfig]:
    """`subscriptionGroupTable` entries; raises BodyDecodeError naming the group."""
    return {name: SubscriptionGroupConfig.from_json_value(value,
                                                          f"subscriptionGroupTable[{name!r}]")
            for name, value in table.items()}


def _or_empty(value: JSONValue) -> JSONValue:
    return {} if value is None else value


def _object(value: JSONValue, path: str) -> dict[str, JSONValue]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{path} is not an object")
    return value


def _int_map(value: JSONValue, path: str) -> dict[int, int]:
    result: dict[int, int] = {}
    for key, offset in _object(value, path).items():
        queue_id = java_int(key, bits=32)
        if queue_id is None:
            raise BodyDecodeError(f"{path} key {key!r} is not an int")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise BodyDecodeError(f"{path}[{queue_id}]={offset!r} is not an offset")
        result[queue_id] = offset
    return result


# --------------------------------------------------------------------------------------------
# Shell


class TopicTable(Protocol):
    data_version: DataVersion

    async def replace_from_master(self, table: Mapping[str, TopicConfig],
                                  version: DataVersion) -> None: ...


class GroupTable(Protocol):
    data_version: DataVersion

    async def replace_from_master(self, table: Mapping[str, SubscriptionGroupConfig],
                                  version: DataVersion) -> None: ...


class OffsetTable(Protocol):
    @property
    def offset_table(self) -> Mapping[str, Mapping[int, int]]: ...

    async def replace_from_master(self, table: dict[str, dict[int, int]],
                                  version: DataVersion) -> None: ...


class DelayOffsets(Protocol):
    async def replace_from_master(self, table: dict[int, int], version: DataVersion
                                  ) -> None: ...


T = TypeVar("T")
H = TypeVar("H", GetAllTopicConfigResponseHeader, GetAllSubscriptionGroupResponseHeader)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    table: Mapping[str, T]
    version: DataVersion
    total: int | None


async def fetch_all_pages(
    fetch: Callable[[int, DataVersion | None], Awaitable[Page[T]]],
) -> tuple[dict[str, T], DataVersion, int]:
    """Run the paging loop over `fetch(seq, version)`; the whole table, its version and the
    number of pages asked."""
    cursor = PageCursor()
    table: dict[str, T] = {}
    while True:
        page = await fetch(cursor.seq, cursor.version)
        step, cursor = next_page_step(cursor, received=len(page.table),
                                      page_version=page.version, total=page.total)
        if step is PageStep.RESTART:
            table.clear()
            continue
        table.update(page.table)
        if step is PageStep.DONE:
            assert cursor.version is not None
            if page.total is not None and len(table) < page.total:
                raise MetadataSyncError(f"pages held {len(table)} distinct entries of "
                                        f"total={page.total}")
            return table, cursor.version, cursor.pages


@dataclass(slots=True)
class SyncCounters:
    rounds: int = 0
    failures: int = 0
    topics_applied: int = 0
    groups_applied: int = 0
    offsets_applied: int = 0
    delay_offsets_applied: int = 0
    last_error: str = ""


Connect = Callable[[str, int], Awaitable[RemotingClient]]


async def _connect(host: str, port: int) -> RemotingClient:
    return await RemotingClient.connect(host, port)


class SlaveSynchronize:
    """The periodic metadata copy of a slave (module docstring)."""

    def __init__(
        self,
        *,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        delay_offsets: DelayOffsets | None,
        own_addr: Callable[[], str],
        interval_ms: int = 3_000,
        max_page_size: int = MAX_PAGE_SIZE_DEFAULT,
        connect: Connect = _connect,
    ) -> None:
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._delay_offsets = delay_offsets
        self._own_addr = own_addr
        self._interval_ms = interval_ms
        self._max_page_size = max_page_size
        self._connect = connect
        self._master: str | None = None
        self._client: RemotingClient | None = None
        self._client_addr: str | None = None
        self._wake = asyncio.Event()
        self._round = asyncio.Lock()  # one round at a time (the task and direct callers)
        self.counters = SyncCounters()

    @property
    def master_addr(self) -> str | None:
        return self._master

    def set_master(self, addr: str | None) -> None:
        """Sync from `addr` ("ip:listenPort", at once, then periodically); None stops."""
        if addr is not None:
            _split_addr(addr)  # raises ValueError now rather than at each round
        if addr != self._master:
            log.info("slave sync master changed old=%s new=%s", self._master, addr)
        self._master = addr
        self._wake.set()

    def start(self, addr: str) -> None:
        self.set_master(addr)

    def stop(self) -> None:
        self.set_master(None)

    async def run(self) -> None:
        """Sync whenever a master is set, until cancelled; errors are logged and retried."""
        try:
            while True:
                if self._master is None:
                    await self._close_client()
                    await self._wake.wait()
                else:
                    try:
                        async with asyncio.timeout(self._interval_ms / 1000):
                            await self._wake.wait()
                    except TimeoutError:
                        pass
                self._wake.clear()
                if self._master is not None:
                    await self.sync_once()
        finally:
            await self._close_client()

    async def sync_once(self) -> bool:
        """One round against the current master; False (logged, counted) if it failed."""
        async with self._round:
            return await self._sync_round()

    async def _sync_round(self) -> bool:
        addr = self._master
        if addr is None or addr == self._own_addr():
            return False
        self.counters.rounds += 1
        try:
            async with asyncio.timeout(SYNC_TIMEOUT_MS / 1000):
                await self.sync_all(addr)
        except (MetadataSyncError, RemotingError, TimeoutError, OSError) as err:
            self.counters.failures += 1
            self.counters.last_error = f"{type(err).__name__}: {err}"
            log.warning("slave sync from master %s failed: %s", addr, self.counters.last_error)
            await self._close_client()
            return False
        return True

    async def sync_all(self, addr: str) -> None:
        """Copy every table from `addr`; raises MetadataSyncError or a RemotingError."""
        client = await self._client_for(addr)
        await self._sync_topics(client, addr)
        await self._sync_offsets(client, addr)
        if self._delay_offsets is not None:
            await self._sync_delay_offsets(client, addr, self._delay_offsets)
        await self._sync_groups(client, addr)

    def _check_master(self, addr: str) -> None:
        """Called right before applying: a node that became master (or follows another one)
        meanwhile must not take this round's tables."""
        if self._master != addr:
            raise MetadataSyncError(f"the master changed from {addr} to {self._master} during "
                                    "the round: not applied")

    async def _sync_topics(self, client: RemotingClient, addr: str) -> None:
        async def fetch(seq: int, version: DataVersion | None) -> Page[TopicConfig]:
            header = GetAllTopicConfigRequestHeader(
                topic_seq=seq, max_topic_num=self._max_page_size,
                data_version="" if version is None else encode_data_version(version))
            response = await self._invoke(client, RequestCode.GET_ALL_TOPIC_CONFIG,
                                          header.to_ext_fields(), "GET_ALL_TOPIC_CONFIG")
            total = _header(GetAllTopicConfigResponseHeader, response).total_topic_num
            wrapper = _decode(lambda: TopicConfigAndMappingSerializeWrapper.decode(
                response.body), "GET_ALL_TOPIC_CONFIG")
            return Page(wrapper.topic_config_table, wrapper.data_version, total)

        configs, version, pages = await fetch_all_pages(fetch)
        if not configs:
            raise MetadataSyncError("GET_ALL_TOPIC_CONFIG: the master lists no topic (a broker "
                                    "always has its system topics): not applied")
        if version == self._topics.data_version:
            return
        self._check_master(addr)
        await self._topics.replace_from_master(configs, version)
        self.counters.topics_applied += 1
        log.info("slave sync: topic configs from master topics=%d pages=%d version=%s",
                 len(configs), pages, version)

    async def _sync_groups(self, client: RemotingClient, addr: str) -> None:
        async def fetch(seq: int, version: DataVersion | None) -> Page[JSONValue]:
            header = GetAllSubscriptionGroupRequestHeader(
                group_seq=seq, max_group_num=self._max_page_size,
                data_version="" if version is None else encode_data_version(version))
            response = await self._invoke(client, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                                          header.to_ext_fields(),
                                          "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
            total = _header(GetAllSubscriptionGroupResponseHeader, response).total_group_num
            value = _decode(lambda: _object(parse_fastjson(response.body), "subscriptionGroup"),
                            "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
            groups = _or_empty(value.get("subscriptionGroupTable"))
            if not isinstance(groups, dict):
                raise MetadataSyncError("GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "
                                        "subscriptionGroupTable is not an object")
            version_now = _decode(lambda: DataVersion.from_json_value(
                value.get("dataVersion") or {}, "subscriptionGroup.dataVersion"),
                "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
            return Page(dict(groups), version_now, total)  # forbiddenTable: ignored (§10)

        table, version, pages = await fetch_all_pages(fetch)
        if not table:
            raise MetadataSyncError("GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the master lists no "
                                    "group (a broker always has its system groups): not applied")
        if version == self._groups.data_version:
            return
        configs = _decode(lambda: decode_groups(table), "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
        self._check_master(addr)
        await self._groups.replace_from_master(configs, version)
        self.counters.groups_applied += 1
        log.info("slave sync: subscription groups from master groups=%d pages=%d version=%s",
                 len(table), pages, version)

    async def _sync_offsets(self, client: RemotingClient, addr: str) -> None:
        response = await self._invoke(client, RequestCode.GET_ALL_CONSUMER_OFFSET, {},
                                      "GET_ALL_CONSUMER_OFFSET")
        body = _decode(lambda: decode_offsets_body(response.body), "GET_ALL_CONSUMER_OFFSET")
        merged = merge_consumer_offsets(self._offsets.offset_table, body.offset_table)
        if merged is None:
            return
        self._check_master(addr)
        await self._offsets.replace_from_master(merged, body.data_version)
        self.counters.offsets_applied += 1

    async def _sync_delay_offsets(self, client: RemotingClient, addr: str,
                                  target: DelayOffsets) -> None:
        response = await self._invoke(client, RequestCode.GET_ALL_DELAY_OFFSET, {},
                                      "GET_ALL_DELAY_OFFSET")
        if not response.body:  # a master without delay offsets answers no body
            return
        body = _decode(lambda: decode_delay_offsets_body(response.body), "GET_ALL_DELAY_OFFSET")
        self._check_master(addr)
        await target.replace_from_master(body.offset_table[""], body.data_version)
        self.counters.delay_offsets_applied += 1

    async def _invoke(self, client: RemotingClient, code: int, fields: dict[str, str],
                      what: str) -> RemotingCommand:
        response = await client.invoke(RemotingCommand.request(code, fields), REQUEST_TIMEOUT_MS)
        if response.code != ResponseCode.SUCCESS:
            raise MetadataSyncError(f"{what}: master answered code={response.code} "
                                    f"remark={response.remark!r}")
        return response

    async def _client_for(self, addr: str) -> RemotingClient:
        if self._client is not None and (self._client_addr != addr or self._client.is_closed):
            await self._close_client()
        if self._client is None:
            host, port = _split_addr(addr)
            self._client = await self._connect(host, port)
            self._client_addr = addr
        return self._client

    async def _close_client(self) -> None:
        client, self._client, self._client_addr = self._client, None, None
        if client is not None:
            await client.close()


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65_536:
        raise ValueError(f"master address {addr!r} is not ip:port")
    return host, int(port)


def _header(cls: type[H], response: RemotingCommand) -> H:
    try:
        return cls.from_ext_fields(response.ext_fields)
    except RemotingCommandError as err:
        raise MetadataSyncError(f"response header: {err}") from err


def _decode(decode: Callable[[], T], what: str) -> T:
    try:
        return decode()
    except BodyDecodeError as err:
        raise MetadataSyncError(f"{what}: body does not decode: {err}") from err
