"""Rill black-box test helper: the official Python SDK (apache-iggy 0.9.0, protocol 0.11) on
the same server, topic and consumer group as a 0.12 client (tests/edge/tests/edge/mixed.rs).
It sends ten messages to partition 0, reads what the 0.12 client wrote to partition 1,
joins the group the 0.12 client is a member of and polls its share with auto-commit. Prints
one JSON line: the payloads read from partition 1, the group's members count while both are
members, and the group poll's partitions and payloads. Exits non-zero on any error."""

import asyncio
import json
import os
import sys

from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

STREAM, TOPIC, GROUP = "mixed", "events", "workers"


async def main(address: str) -> None:
    client = IggyClient.from_connection_string(f"iggy://iggy:iggy@{address}")
    await client.connect()
    await client.send_messages(STREAM, TOPIC, 0, [SendMessage(f"py-{i}") for i in range(10)])
    written = await client.poll_messages(
        STREAM, TOPIC, consumer=Consumer.Single(5), polling_strategy=PollingStrategy.Offset(0),
        count=100, auto_commit=False, partition_id=1)
    await client.join_consumer_group(STREAM, TOPIC, GROUP)
    group = await client.get_consumer_group(STREAM, TOPIC, GROUP)
    # A partition the other member held comes over once that member lets go of it or its
    # grace ends: poll until the share arrives.
    polled = []
    for _ in range(200):
        polled = await client.poll_messages(
            STREAM, TOPIC, consumer=Consumer.Group(GROUP), polling_strategy=PollingStrategy.Next(),
            count=100, auto_commit=True)
        if polled:
            break
        await asyncio.sleep(0.1)
    print(json.dumps({
        "read": [m.payload().decode() for m in written],
        "members": group.members_count,
        "group_partitions": sorted({m.partition_id() for m in polled}),
        "group_payloads": [m.payload().decode() for m in polled],
    }))


asyncio.run(main(sys.argv[1]))
sys.stdout.flush()
# The SDK's background runtime can abort while the interpreter tears it down: the verdict
# is already printed, so skip the teardown.
os._exit(0)
