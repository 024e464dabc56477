"""Send ten messages to a pyrmq broker and pull them back with pyrmq's own Python client.

Run against `pyrmq-quickstart` (or `./scripts/run.sh`): `.venv/bin/python examples/quickstart.py`
asks the name server (`--namesrv`, default 127.0.0.1:9876) which broker is `broker-a`'s master
(brokerId 0 in its cluster info) and talks to it; `--broker host:port` skips the name server.
"""

from __future__ import annotations

import argparse
import asyncio

from pyrmq_client import BrokerClient, Message, Producer, PullConsumer, PullStatus
from remoting.bodies import ClusterInfo
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


async def find_master(namesrv: str, broker_name: str) -> str:
    """The master's address of `broker_name` as the name server lists it (GET_BROKER_CLUSTER_INFO,
    brokerId 0)."""
    host, _, port = namesrv.rpartition(":")
    async with await RemotingClient.connect(host, int(port)) as client:
        response = await client.invoke(
            RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3000)
    if response.code != ResponseCode.SUCCESS:
        raise SystemExit(f"{namesrv}: GET_BROKER_CLUSTER_INFO answered {response.code}")
    data = ClusterInfo.decode(response.body).broker_addr_table.get(broker_name)
    if data is None or 0 not in data.broker_addrs:
        raise SystemExit(f"{namesrv} lists no master of {broker_name}")
    return data.broker_addrs[0]


async def main(host: str, port: int) -> int:
    async with await BrokerClient.connect(host, port) as client:
        producer = Producer(client, "QuickstartProducer")
        for i in range(10):
            result = await producer.send(Message("QuickstartTopic", f"hello {i}".encode(),
                                                 tags="TagA"), queue_id=0)
            print(f"sent msgId={result.msg_id} queueOffset={result.queue_offset}")
        consumer = PullConsumer(client, "QuickstartConsumer")
        await consumer.subscribe({"QuickstartTopic": "TagA"})
        offset = await consumer.committed("QuickstartTopic", 0) or 0
        received = 0
        while True:
            pulled = await consumer.pull("QuickstartTopic", 0, offset, max_nums=32,
                                         subscription="TagA", suspend_timeout_ms=1000)
            if pulled.status is not PullStatus.FOUND:
                break
            for record in pulled.messages:
                print(f"received queueOffset={record.queue_offset} body={record.body.decode()}")
                received += 1
            offset = pulled.next_begin_offset
        await consumer.commit("QuickstartTopic", 0, offset)
        print(f"received {received} messages; committed offset {offset}")
        return 0 if received >= 10 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--broker-name", default="broker-a")
    parser.add_argument("--broker", help="host:port of a broker (skips the name server)")
    args = parser.parse_args()
    broker = args.broker or asyncio.run(find_master(args.namesrv, args.broker_name))
    print(f"broker {broker}")
    host, _, port = broker.rpartition(":")
    raise SystemExit(asyncio.run(main(host, int(port))))
