"""pyrmq's own Python client, used by tests, tools, examples, benchmarks and `pyspark_rocketmq`.

Why a package of its own (and not `rocketmq_client`): no broker code uses it, and its name says
whose client it is; `rocketmq` names Apache's clients (PyPI `rocketmq`, the C++ client's binding).

- `broker_client`: `BrokerClient`, one connection to one broker (send, batch send, pull,
  offsets, heartbeat, admin), with `Producer` and `PullConsumer` around it.
- `routing` (pure): `MessageQueue`, `TopicRoute` (a name server's route as queues and masters),
  `QueueSelector`.
- `cluster`: `ClusterClient`, name-server routing over `BrokerClient`s, with route refresh on
  errors and bounded retries only where nothing was stored.
- `errors`: what callers catch.
"""

from pyrmq_client.broker_client import (
    BrokerClient,
    Message,
    Producer,
    PullConsumer,
    PullResult,
    PullStatus,
    SendResult,
    decode_records,
    encode_batch_body,
    new_client_id,
)
from pyrmq_client.cluster import ClusterClient
from pyrmq_client.errors import BrokerClientError, ClientError, RetriesExhaustedError, RouteError
from pyrmq_client.routing import MessageQueue, QueueSelector, TopicRoute

__all__ = [
    "BrokerClient",
    "BrokerClientError",
    "ClientError",
    "ClusterClient",
    "Message",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "QueueSelector",
    "RetriesExhaustedError",
    "RouteError",
    "SendResult",
    "TopicRoute",
    "decode_records",
    "encode_batch_body",
    "new_client_id",
]
