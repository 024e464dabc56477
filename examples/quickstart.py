"""Send ten messages to a pyrmq broker and pull them back with pyrmq's own Python client.

Run against `./scripts/run.sh`: `.venv/bin/python examples/quickstart.py`.
"""

from __future__ import annotations

import argparse
import asyncio

from pyrmq_client import BrokerClient, Message, Producer, PullConsumer, PullStatus


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
    parser.add_argument("--broker", default="127.0.0.1:10911")
    args = parser.parse_args()
    host, _, port = args.broker.rpartition(":")
    raise SystemExit(asyncio.run(main(host, int(port))))
