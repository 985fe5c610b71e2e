"""The disk alarm: publishers get connection.blocked and are no longer read
from, consumers keep draining, and connection.unblocked follows when space
returns."""

from __future__ import annotations

import time

import pika

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread


def test_disk_alarm_blocks_publishers_not_consumers():
    config = BrokerConfig(port=0, management_port=0, message_expiry_scan_period=50,
                          disk_free_limit=10**18)  # more than any disk: alarm at once
    with BrokerThread(config) as broker:
        events = []
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        publisher.add_on_connection_blocked_callback(lambda c, m: events.append("blocked"))
        publisher.add_on_connection_unblocked_callback(lambda c, m: events.append("unblocked"))
        pub = publisher.channel()
        pub.queue_declare("work")
        consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
        con = consumer.channel()
        pub.basic_publish("", "work", b"before")  # marks the connection as a publisher
        deadline = time.monotonic() + 5
        while "blocked" not in events and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.05)
        assert events == ["blocked"]
        assert broker.broker.alarms == {"disk"}
        # The consumer still drains what is there.
        method, _, body = con.basic_get("work", auto_ack=True)
        assert body == b"before"
        pub.basic_publish("", "work", b"while blocked")  # buffered, not read
        time.sleep(0.2)
        assert con.basic_get("work", auto_ack=True)[0] is None
        broker.call(setattr, broker.broker.config, "disk_free_limit", 0)
        deadline = time.monotonic() + 5
        while "unblocked" not in events and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.05)
        assert events == ["blocked", "unblocked"]
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = con.basic_get("work", auto_ack=True)[2]
            time.sleep(0.02)
        assert got == b"while blocked"
        publisher.close()
        consumer.close()
