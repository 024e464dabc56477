"""Numbers of the remoting protocol: request and response codes, languages, serialize types, flags.

Every value is written out as RocketMQ has it (`RequestCode.java`, `ResponseCode.java`,
`RemotingSysResponseCode.java`, `LanguageCode.java`; docs/remoting-protocol.md §5, §12), so
reordering this file never changes a byte on the wire. A command's `code` stays a plain `int`:
codes we do not know must still travel (and be answered with REQUEST_CODE_NOT_SUPPORTED).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class RequestCode(IntEnum):
    """Request codes (`RequestCode.java`); the comment says who sends it."""

    # client -> broker
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17  # admin
    GET_ALL_TOPIC_CONFIG = 21  # slave -> master (VIP port)
    UPDATE_BROKER_CONFIG = 25  # admin
    GET_BROKER_CONFIG = 26  # admin
    GET_BROKER_RUNTIME_INFO = 28  # admin
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39  # broker -> producer, oneway
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # broker -> consumer, oneway
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43  # slave -> master
    GET_ALL_DELAY_OFFSET = 45  # slave -> master
    GET_TIMER_CHECK_POINT = 60  # slave -> master (VIP port)
    GET_TIMER_METRICS = 61  # slave -> master (VIP port)
    # broker <-> name server
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201  # slave -> master
    GET_TOPIC_STATS_INFO = 202  # admin -> broker (`mqadmin topicStatus`)
    GET_CONSUMER_CONNECTION_LIST = 203  # admin
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206  # admin -> name server (`mqadmin topicList`)
    GET_CONSUMER_RUNNING_INFO = 307  # broker -> consumer
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    GET_TOPIC_CONFIG = 351  # admin -> broker (`mqadmin topicStatus`)
    LITE_PULL_MESSAGE = 361
    GET_ALL_MESSAGE_REQUEST_MODE = 402  # slave -> master
    BROKER_HEARTBEAT = 904  # broker -> name server or controller, oneway
    GET_BROKER_HA_STATUS = 907  # admin -> broker (`mqadmin haStatus`)
    # broker <-> controller
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006  # admin
    GET_BROKER_EPOCH_CACHE = 1007  # admin -> broker
    NOTIFY_BROKER_ROLE_CHANGED = 1008  # controller -> broker, oneway
    UPDATE_CONTROLLER_CONFIG = 1009  # admin
    GET_CONTROLLER_CONFIG = 1010  # admin
    CLEAN_BROKER_DATA = 1011  # admin
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # pop consumption (above 32767: cannot travel in a ROCKETMQ binary header)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055


class ResponseCode(IntEnum):
    """Response codes (`RemotingSysResponseCode.java` 0-4, `ResponseCode.java` the rest)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    # 5.5.0 only (LMQ and lite-topic quotas): pyrmq never sends them; named for decoding.
    LMQ_QUOTA_EXCEEDED = 2017
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 2018


class LanguageCode(IntEnum):
    """The sender's language: its name goes into JSON headers, its byte into binary headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """Header encoding, the high byte of a frame's second word (`SerializeType.java`)."""

    JSON = 0
    ROCKETMQ = 1


RESPONSE_FLAG: Final = 0b01
"""`flag` bit 0: the command is a response (`RemotingCommand.RPC_TYPE`)."""
ONEWAY_FLAG: Final = 0b10
"""`flag` bit 1: a oneway request; no response is ever sent (`RemotingCommand.RPC_ONEWAY`)."""

JAVA_VERSION_5_3_3: Final = 479
"""`MQVersion.Version.V5_3_3.ordinal()`: the version a Java 5.3.3 broker or client sends."""
JAVA_VERSION_5_5_0: Final = 513
"""`MQVersion.Version.V5_5_0.ordinal()`: the version a Java 5.5.0 broker or client sends."""
PYRMQ_VERSION: Final = JAVA_VERSION_5_5_0
"""THE version pyrmq announces: written into every command it builds (header `version`) and
reported as `brokerVersion` by GET_BROKER_RUNTIME_INFO; pyrmq speaks as a RocketMQ 5.5.0 server
(spec README "Version differences" row 7). A name server parses the REGISTER_BROKER body as a
RegisterBrokerBody only from version 37 on, and answers route queries in standard JSON from 401
on, so this must be a real, recent Java version number; no Java code of 5.3.3 or 5.5.0
distinguishes versions above 475, so 479 and 513 behave the same towards Java peers. Decoders
accept any version."""
PYRMQ_VERSION_DESC: Final = "V5_5_0"
"""`MQVersion.getVersionDesc(PYRMQ_VERSION)`: the name mqadmin prints (`brokerVersionDesc`)."""
