"""Rill black-box test helper: the official Python SDK (apache-iggy 0.9.0, protocol 0.11)
reads every message of one partition from offset 0 and prints their payloads, one per line.
Used where a 0.12 client wrote batches a 0.11 client must still read
(tests/edge/tests/edge/producers.rs). Exits non-zero on any error."""

import asyncio
import os
import sys

from apache_iggy import Consumer, IggyClient, PollingStrategy


async def main(address: str, stream: str, topic: str, partition: int) -> None:
    client = IggyClient.from_connection_string(f"iggy://iggy:iggy@{address}")
    await client.connect()
    polled = await client.poll_messages(
        stream, topic, consumer=Consumer.Single(9), polling_strategy=PollingStrategy.Offset(0),
        count=1000, auto_commit=False, partition_id=partition)
    for message in polled:
        print(message.payload().decode())


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
sys.stdout.flush()
# The SDK's background runtime can abort while the interpreter tears it down: the payloads
# are already printed, so skip the teardown.
os._exit(0)
