"""Route and cluster-info bodies against the spec's bytes (docs/remoting-protocol.md §7.3, §7.4,
§11), and against the parser every pyrmq client uses."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.route_body import (
    encode_cluster_info,
    encode_topic_route_data,
    quote_browser_compatible,
    wants_standard_json,
)
from remoting.bodies import BrokerData, ClusterInfo, QueueData, TopicRouteData
from tests.remoting.support import compact_json

# docs/remoting-protocol.md §7.3, the standard form "exactly as fastjson writes it".
SPEC_ROUTE_STANDARD = compact_json("""
{"brokerDatas":[{"brokerAddrs":{"0":"192.168.0.10:10911","2":"192.168.0.11:10911"},
   "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],
 "filterServerTable":{},
 "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}
""")

BROKER_A = BrokerData(
    cluster="DefaultCluster",
    broker_name="broker-a",
    broker_addrs={0: "192.168.0.10:10911", 2: "192.168.0.11:10911"},
)
SPEC_ROUTE = TopicRouteData(
    queue_datas=(QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6),),
    broker_datas=(BROKER_A,),
)


def test_standard_route_is_the_spec_example_byte_for_byte() -> None:
    assert encode_topic_route_data(SPEC_ROUTE, standard_json=True) == SPEC_ROUTE_STANDARD


def test_default_route_has_unquoted_broker_id_keys() -> None:
    # §7.3: "otherwise it sends fastjson's default non-standard form {"brokerAddrs":{0:"…",2:"…"}}"
    assert encode_topic_route_data(SPEC_ROUTE, standard_json=False) == SPEC_ROUTE_STANDARD.replace(
        b'{"0":', b"{0:"
    ).replace(b',"2":', b",2:")


def test_cluster_info_is_the_spec_shape_with_unquoted_keys() -> None:
    # §7.4: {"brokerAddrTable":{"broker-a":{<BrokerData as above>}},
    #        "clusterAddrTable":{"DefaultCluster":["broker-a"]}}, keys unquoted.
    info = ClusterInfo(
        broker_addr_table={"broker-a": BROKER_A},
        cluster_addr_table={"DefaultCluster": ("broker-a",)},
    )
    assert encode_cluster_info(info) == compact_json("""
        {"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"192.168.0.10:10911",2:"192.168.0.11:10911"},
        "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},
        "clusterAddrTable":{"DefaultCluster":["broker-a"]}}
    """)


def test_standard_form_sorts_broker_ids_numerically_and_default_keeps_given_order() -> None:
    broker = BrokerData("c", "b", broker_addrs={16: "x:1", 2: "y:1", 10: "z:1"}, zone_name="z")
    route = TopicRouteData(broker_datas=(broker,), queue_datas=())
    standard = encode_topic_route_data(route, standard_json=True)
    default = encode_topic_route_data(route, standard_json=False)
    assert b'{"2":"y:1","10":"z:1","16":"x:1"}' in standard
    assert b'{16:"x:1",2:"y:1",10:"z:1"}' in default
    assert standard.endswith(
        b'"enableActingMaster":false,"zoneName":"z"}],"filterServerTable":{},"queueDatas":[]}'
    )


def test_filter_server_table_and_order_topic_conf_in_property_order() -> None:
    route = TopicRouteData(
        filter_server_table={"b:1": ("f2",), "a:1": ("f1",)}, order_topic_conf="broker-a:4"
    )
    assert encode_topic_route_data(route, standard_json=True) == (
        b'{"brokerDatas":[],"filterServerTable":{"a:1":["f1"],"b:1":["f2"]},'
        b'"orderTopicConf":"broker-a:4","queueDatas":[]}'
    )
    assert encode_topic_route_data(route, standard_json=False).startswith(
        b'{"brokerDatas":[],"filterServerTable":{"b:1":["f2"],"a:1":["f1"]},'
    )


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        pytest.param("broker-a", '"broker-a"', id="plain"),
        pytest.param("a/b", '"a\\/b"', id="slash-escaped"),
        pytest.param('q"\\', '"q\\"\\\\"', id="quote-backslash"),
        pytest.param("\t\n\x01", '"\\t\\n\\u0001"', id="controls"),
        pytest.param("\x7fé", '"\\u007F\\u00E9"', id="del-and-non-ascii"),
        pytest.param("\U0001f600", '"\\uD83D\\uDE00"', id="surrogate-pair"),
    ],
)
def test_browser_compatible_quoting(text: str, quoted: str) -> None:
    assert quote_browser_compatible(text) == quoted


def test_standard_form_escapes_names_the_browser_compatible_way() -> None:
    broker = BrokerData("clüster", "b/1", broker_addrs={0: "h:1"})
    route = TopicRouteData(broker_datas=(broker,))
    assert b'"brokerName":"b\\/1","cluster":"cl\\u00FCster"' in encode_topic_route_data(
        route, standard_json=True
    )
    assert '"brokerName":"b/1","cluster":"clüster"'.encode() in encode_topic_route_data(
        route, standard_json=False
    )


@pytest.mark.parametrize(
    ("version", "accept_standard_json_only", "standard"),
    [
        pytest.param(479, None, True, id="java-5.3.3"),
        pytest.param(401, None, True, id="java-4.9.4"),
        pytest.param(400, None, False, id="java-4.9.3"),
        pytest.param(333, None, False, id="cpp-client"),
        pytest.param(333, True, True, id="asks-for-standard"),
        pytest.param(0, False, False, id="no-version"),
    ],
)
def test_which_requests_get_standard_json(
    version: int, accept_standard_json_only: bool | None, standard: bool
) -> None:
    assert (
        wants_standard_json(version=version, accept_standard_json_only=accept_standard_json_only)
        is standard
    )


names = st.text(st.characters(codec="utf-16", exclude_categories=["Cs"]), max_size=12)
broker_datas = st.builds(
    BrokerData,
    cluster=names,
    broker_name=names,
    broker_addrs=st.dictionaries(st.integers(0, 2**63 - 1), names, max_size=4),
    zone_name=st.none() | names,
    enable_acting_master=st.booleans(),
)
queue_datas = st.builds(
    QueueData,
    broker_name=names,
    read_queue_nums=st.integers(0, 2**31 - 1),
    write_queue_nums=st.integers(0, 2**31 - 1),
    perm=st.integers(0, 15),
    topic_sys_flag=st.integers(0, 2**31 - 1),
)
routes = st.builds(
    TopicRouteData,
    queue_datas=st.lists(queue_datas, max_size=3).map(tuple),
    broker_datas=st.lists(broker_datas, max_size=3).map(tuple),
    filter_server_table=st.dictionaries(names, st.lists(names, max_size=2).map(tuple), max_size=2),
    order_topic_conf=st.none() | names,
)


@given(route=routes, standard_json=st.booleans())
def test_every_route_decodes_back_with_the_client_parser(
    route: TopicRouteData, standard_json: bool
) -> None:
    body = encode_topic_route_data(route, standard_json=standard_json)
    assert TopicRouteData.decode(body) == route
    if standard_json:
        json.loads(body)  # strict JSON, ASCII only
        assert body.isascii()


@given(
    info=st.builds(
        ClusterInfo,
        broker_addr_table=st.dictionaries(names, broker_datas, max_size=3),
        cluster_addr_table=st.dictionaries(names, st.lists(names, max_size=3).map(tuple)),
    )
)
def test_every_cluster_info_decodes_back_with_the_client_parser(info: ClusterInfo) -> None:
    assert ClusterInfo.decode(encode_cluster_info(info)) == info
