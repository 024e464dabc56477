"""JSON bodies: the spec's examples byte for byte, the C++ client's forms, and bad input."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListBody,
    ConsumeType,
    DataVersion,
    HeartbeatData,
    KVTable,
    MessageModel,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicFilterType,
    TopicRouteData,
)
from remoting.errors import BodyDecodeError
from tests.remoting.support import compact_json

# §7.1: 605 bytes, bodyCrc32 1735289491.
REGISTER_BROKER_BODY = compact_json(
    """
{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":2,
"timestamp":1700000000000},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},
"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,
"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4},
"TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",
"topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}},"topicQueueMappingDetailMap":{},
"topicQueueMappingInfoMap":{}}}
"""
)

# §7.3, the standard form.
TOPIC_ROUTE_DATA = compact_json(
    """
{"brokerDatas":[{"brokerAddrs":{"0":"192.168.0.10:10911","2":"192.168.0.11:10911"},
   "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],
 "filterServerTable":{},
 "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}
"""
)

# §6.9, as the Java client writes it.
JAVA_HEARTBEAT = compact_json(
    """
{"clientID":"192.168.0.2@12345#...","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",
 "consumeType":"CONSUME_PASSIVELY","groupName":"CG","messageModel":"CLUSTERING",
 "subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG",
   "subString":"TagA || TagB","subVersion":1700000000000,"tagsSet":["TagA","TagB"],
   "topic":"TopicTest"}],
 "unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"PG"}],"withoutSub":false}
"""
)

BROKER_A = BrokerData(
    cluster="DefaultCluster",
    broker_name="broker-a",
    broker_addrs={0: "192.168.0.10:10911", 2: "192.168.0.11:10911"},
)


def test_register_broker_body_matches_spec_bytes_and_crc() -> None:
    body = RegisterBrokerBody(
        TopicConfigAndMappingSerializeWrapper(
            topic_config_table={
                "TopicTest": TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4),
                "TBW102": TopicConfig("TBW102", read_queue_nums=8, write_queue_nums=8, perm=7),
            },
            data_version=DataVersion(state_version=2, timestamp=1700000000000, counter=3),
            mapping_data_version=DataVersion(timestamp=1700000000000),
        )
    )
    encoded = body.encode()
    assert encoded == REGISTER_BROKER_BODY
    assert len(encoded) == 605
    assert zlib.crc32(encoded) & 0x7FFFFFFF == 1735289491
    assert RegisterBrokerBody.decode(REGISTER_BROKER_BODY) == body


def test_topic_route_data_matches_spec_standard_form() -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6),),
        broker_datas=(BROKER_A,),
    )
    assert route.encode() == TOPIC_ROUTE_DATA
    assert TopicRouteData.decode(TOPIC_ROUTE_DATA) == route


def test_topic_route_data_reads_fastjsons_unquoted_broker_ids() -> None:
    nonstandard = TOPIC_ROUTE_DATA.replace(b'{"0":', b"{0:").replace(b',"2":', b",2:")
    assert b"{0:" in nonstandard
    assert TopicRouteData.decode(nonstandard) == TopicRouteData.decode(TOPIC_ROUTE_DATA)


def test_cluster_info_reads_unquoted_broker_ids() -> None:
    body = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"192.168.0.10:10911",'
        b'2:"192.168.0.11:10911"},"brokerName":"broker-a","cluster":"DefaultCluster",'
        b'"enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )
    info = ClusterInfo.decode(body)
    assert info == ClusterInfo(
        broker_addr_table={"broker-a": BROKER_A},
        cluster_addr_table={"DefaultCluster": ("broker-a",)},
    )
    assert ClusterInfo.decode(info.encode()) == info


def test_java_heartbeat_decodes_and_reencodes_byte_for_byte() -> None:
    heartbeat = HeartbeatData.decode(JAVA_HEARTBEAT)
    assert heartbeat == HeartbeatData(
        client_id="192.168.0.2@12345#...",
        producer_data_set=(ProducerData("PG"),),
        consumer_data_set=(
            ConsumerData(
                group_name="CG",
                consume_type=ConsumeType.CONSUME_PASSIVELY,
                message_model=MessageModel.CLUSTERING,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                subscription_data_set=(
                    SubscriptionData(
                        topic="TopicTest",
                        sub_string="TagA || TagB",
                        tags_set=("TagA", "TagB"),
                        code_set=(2598919, 2598920),
                        sub_version=1700000000000,
                    ),
                ),
            ),
        ),
    )
    assert heartbeat.encode() == JAVA_HEARTBEAT


def test_cpp_heartbeat_with_ordinals_string_numbers_and_omissions_decodes() -> None:
    body = (
        b'{"clientID":"10.0.0.1@42","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,'
        b'"groupName":"CG","messageModel":0,"subscriptionDataSet":[{"codeSet":[0],'
        b'"subString":"TagA","subVersion":"1700000000000","tagsSet":["TagA"],"topic":"T"}]}],'
        b'"producerDataSet":[]}'
    )
    heartbeat = HeartbeatData.decode(body)
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_from_where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert consumer.consume_type == ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model == MessageModel.BROADCASTING
    assert consumer.unit_mode is False
    (subscription,) = consumer.subscription_data_set
    assert subscription.sub_version == 1700000000000
    assert (subscription.expression_type, subscription.class_filter_mode) == ("TAG", False)
    assert (heartbeat.heartbeat_fingerprint, heartbeat.without_sub) == (0, False)


@pytest.mark.parametrize(
    ("body", "path"),
    [
        pytest.param(b'{"clientID":"c","consumerDataSet":{}}',
                     "HeartbeatData.consumerDataSet={} is not an array", id="type"),
        pytest.param(b"{}", "HeartbeatData.clientID is required", id="missing"),
        pytest.param(
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":7}]}',
            "HeartbeatData.consumerDataSet[0].consumeType=7 is not a ConsumeType",
            id="enum-ordinal",
        ),
        pytest.param(b"[]", "HeartbeatData=[] is not an object", id="not-object"),
        pytest.param(b'{"clientID":', "JSON body rejected", id="truncated"),
    ],
)
def test_bad_body_names_the_json_path(body: bytes, path: str) -> None:
    with pytest.raises(BodyDecodeError, match=path.replace("[", r"\[").replace("]", r"\]")):
        HeartbeatData.decode(body)


def test_broker_addrs_key_must_be_a_number() -> None:
    with pytest.raises(BodyDecodeError, match="key 'master' is not an int64"):
        BrokerData.decode(b'{"cluster":"C","brokerName":"b","brokerAddrs":{"master":"a"}}')


TEXT = st.text(max_size=10)
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


@given(
    config=st.builds(
        TopicConfig,
        topic_name=TEXT,
        read_queue_nums=INT32,
        write_queue_nums=INT32,
        perm=INT32,
        topic_filter_type=st.sampled_from(TopicFilterType),
        topic_sys_flag=INT32,
        order=st.booleans(),
        attributes=st.dictionaries(TEXT, TEXT, max_size=3),
    ),
    version=st.builds(DataVersion, state_version=INT64, timestamp=INT64, counter=INT64),
)
def test_topic_config_wrapper_round_trip(config: TopicConfig, version: DataVersion) -> None:
    wrapper = TopicConfigAndMappingSerializeWrapper(
        topic_config_table={config.topic_name: config},
        data_version=version,
        topic_queue_mapping_info_map={"t": {"bname": "b", "epoch": 1}},
    )
    assert TopicConfigAndMappingSerializeWrapper.decode(wrapper.encode()) == wrapper


@given(ids=st.lists(TEXT, max_size=5), table=st.dictionaries(TEXT, TEXT, max_size=5))
def test_consumer_list_and_kv_table_round_trip(ids: list[str], table: dict[str, str]) -> None:
    consumers = ConsumerListBody(tuple(ids))
    assert ConsumerListBody.decode(consumers.encode()) == consumers
    assert KVTable.decode(KVTable(table).encode()) == KVTable(table)


def test_old_topic_config_serialize_wrapper_without_mapping_fields_decodes() -> None:
    body = b'{"dataVersion":{"counter":1,"timestamp":5},"topicConfigTable":{"T":{"topicName":"T"}}}'
    wrapper = TopicConfigAndMappingSerializeWrapper.decode(body)
    assert wrapper.topic_config_table == {"T": TopicConfig("T")}
    assert wrapper.data_version == DataVersion(timestamp=5, counter=1)
    assert wrapper.topic_queue_mapping_info_map == {}
