"""The name server's JSON answers, byte for byte as a Java name server's fastjson writes them.

Three bodies (docs/remoting-protocol.md §7.3, §7.4, §11):

- GET_ROUTEINFO_BY_TOPIC's `TopicRouteData`, in one of two forms. The **standard** form, sent
  when the request's version is >= 401 (4.9.4) or it asks `acceptStandardJsonOnly=true`, is
  fastjson with `BrowserCompatible` and `MapSortField`: brokerAddrs keys quoted (`{"0":..}`),
  every map sorted by key (Long keys numerically), and in strings `"`, `/` and `\\` escaped with
  a backslash, `\\b \\f \\n \\r \\t` short, every other UTF-16 unit below 0x20 or from 0x7F up as
  `\\uXXXX` (upper-case hex). The **default** form, for older clients (the C++ client sends
  version 333), is plain fastjson: brokerAddrs keys unquoted (`{0:"..",2:".."}`, not standard
  JSON; fastjson and the C++ client parse it), maps in the order given, strings escaped as
  `remoting.fastjson` does.
- GET_BROKER_CLUSTER_INFO's `ClusterInfo`, always plain fastjson, so its brokerAddrs keys are
  unquoted numbers whatever the request's version.
- GET_ALL_TOPIC_LIST_FROM_NAMESERVER's `TopicList` (`{"topicList":[...]}`, `brokerAddr` null
  and so omitted). Java's list comes in ConcurrentHashMap order, which depends on its resize
  history; pyrmq sorts it instead (the field is a Set: readers rely on no order).

Bean properties are written in name order and None is omitted, as fastjson does. Lists and maps
keep the order the caller gives (`RouteInfoManager` gives Java's hash-table order) except where
`MapSortField` sorts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from remoting.bodies import BrokerData, ClusterInfo, QueueData, TopicRouteData
from remoting.fastjson import quote_fastjson

STANDARD_JSON_MIN_VERSION: Final = 401
"""`MQVersion.Version.V4_9_4.ordinal()`: from this request version on, routes are standard JSON."""

_SHORT_ESCAPES: Final = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def wants_standard_json(*, version: int, accept_standard_json_only: bool | None) -> bool:
    """True if a GET_ROUTEINFO_BY_TOPIC request gets the standard form (ClientRequestProcessor)."""
    return version >= STANDARD_JSON_MIN_VERSION or bool(accept_standard_json_only)


def quote_browser_compatible(text: str) -> str:
    """`text` as a JSON string literal, escaped as fastjson's `BrowserCompatible` escapes it
    (per UTF-16 unit, so a character above U+FFFF becomes two `\\uXXXX` surrogates)."""
    if text.isascii() and text.isprintable() and not any(c in text for c in '"/\\'):
        return f'"{text}"'
    parts = ['"']
    units = text.encode("utf-16-be", "surrogatepass")
    for index in range(0, len(units), 2):
        unit = units[index] << 8 | units[index + 1]
        char = chr(unit)
        if char in '"/\\':
            parts.append("\\" + char)
        elif char in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[char])
        elif unit < 0x20 or unit >= 0x7F:
            parts.append(f"\\u{unit:04X}")
        else:
            parts.append(char)
    parts.append('"')
    return "".join(parts)


def _java_string_order(key: str) -> bytes:
    """Sort key equal to Java's `String.compareTo` (UTF-16 code units), as TreeMap sorts."""
    return key.encode("utf-16-be", "surrogatepass")


def _broker_data(broker: BrokerData, *, quote: Callable[[str], str], standard: bool) -> str:
    if standard:  # MapSortField: a TreeMap over the Long keys; BrowserCompatible quotes them
        addrs = ",".join(
            f'"{broker_id}":{quote(broker.broker_addrs[broker_id])}'
            for broker_id in sorted(broker.broker_addrs)
        )
    else:
        addrs = ",".join(
            f"{broker_id}:{quote(addr)}" for broker_id, addr in broker.broker_addrs.items()
        )
    zone = "" if broker.zone_name is None else f',"zoneName":{quote(broker.zone_name)}'
    return (
        f'{{"brokerAddrs":{{{addrs}}},"brokerName":{quote(broker.broker_name)},'
        f'"cluster":{quote(broker.cluster)},'
        f'"enableActingMaster":{"true" if broker.enable_acting_master else "false"}{zone}}}'
    )


def _queue_data(queue: QueueData, *, quote: Callable[[str], str]) -> str:
    return (
        f'{{"brokerName":{quote(queue.broker_name)},"perm":{queue.perm},'
        f'"readQueueNums":{queue.read_queue_nums},"topicSysFlag":{queue.topic_sys_flag},'
        f'"writeQueueNums":{queue.write_queue_nums}}}'
    )


def _string_list_map(
    table: Mapping[str, tuple[str, ...]], *, quote: Callable[[str], str], standard: bool
) -> str:
    keys = sorted(table, key=_java_string_order) if standard else list(table)
    return ",".join(
        f"{quote(key)}:[{','.join(quote(item) for item in table[key])}]" for key in keys
    )


def encode_topic_route_data(route: TopicRouteData, *, standard_json: bool) -> bytes:
    """GET_ROUTEINFO_BY_TOPIC's body in the standard or the default form (module docstring).

    Static-topic mappings (`topicQueueMappingByBroker`) are not supported: a route carrying
    them raises ValueError (the name server never builds one).
    """
    if route.topic_queue_mapping_by_broker is not None:
        raise ValueError("topicQueueMappingByBroker is not supported in routes")
    quote = quote_browser_compatible if standard_json else quote_fastjson
    brokers = ",".join(
        _broker_data(broker, quote=quote, standard=standard_json) for broker in route.broker_datas
    )
    filter_servers = _string_list_map(
        route.filter_server_table, quote=quote, standard=standard_json
    )
    order_topic_conf = ""
    if route.order_topic_conf is not None:
        order_topic_conf = f',"orderTopicConf":{quote(route.order_topic_conf)}'
    queues = ",".join(_queue_data(queue, quote=quote) for queue in route.queue_datas)
    text = (
        f'{{"brokerDatas":[{brokers}],"filterServerTable":{{{filter_servers}}}'
        f'{order_topic_conf},"queueDatas":[{queues}]}}'
    )
    return text.encode("utf-8")


def encode_cluster_info(info: ClusterInfo) -> bytes:
    """GET_BROKER_CLUSTER_INFO's body: plain fastjson, brokerAddrs keys unquoted."""
    brokers = ",".join(
        f"{quote_fastjson(name)}:{_broker_data(broker, quote=quote_fastjson, standard=False)}"
        for name, broker in info.broker_addr_table.items()
    )
    clusters = _string_list_map(info.cluster_addr_table, quote=quote_fastjson, standard=False)
    return f'{{"brokerAddrTable":{{{brokers}}},"clusterAddrTable":{{{clusters}}}}}'.encode()


def encode_topic_list(topics: Iterable[str]) -> bytes:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER's body: plain fastjson, topics sorted."""
    names = ",".join(quote_fastjson(topic) for topic in sorted(topics))
    return f'{{"topicList":[{names}]}}'.encode()
