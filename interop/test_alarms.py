"""The memory and disk alarms: publishers get connection.blocked and are no
longer read from, consumers keep draining, connection.unblocked follows when
the alarm clears, and nothing published meanwhile is lost."""

from __future__ import annotations

import time

import pika
import pytest

from amqp_server.broker import resources
from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from interop.waiting import wait_for, wait_get

# Each alarm: the setting that trips it at once, and the value that clears it.
ALARMS = {
    "disk": ("disk_free_limit", 10**18, 0),  # more free bytes than any disk has
    "memory": ("vm_memory_high_watermark_absolute", 1, 10**15),  # 1 byte of RSS
}


@pytest.mark.parametrize("resource", sorted(ALARMS))
def test_alarm_blocks_publishers_not_consumers(resource):
    key, trip, clear = ALARMS[resource]
    config = BrokerConfig(port=0, management_port=0, message_expiry_scan_period=50,
                          **{key: trip})
    with BrokerThread(config) as broker:
        events = []
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        publisher.add_on_connection_blocked_callback(
            lambda c, m: events.append(("blocked", m.method.reason)))
        publisher.add_on_connection_unblocked_callback(lambda c, m: events.append("unblocked"))
        pub = publisher.channel()
        pub.confirm_delivery()
        pub.queue_declare("work")
        consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
        con = consumer.channel()
        for number in range(100):  # confirmed: the first publish marks a publisher
            pub.basic_publish("", "work", b"before %d" % number)
        assert wait_for(lambda: events, step=lambda: publisher.process_data_events(0.05))
        assert events == [("blocked", f"low on {resource}")]
        assert broker.broker.alarms == {resource}
        # The consumer still drains what is there.
        drained = [con.basic_get("work", auto_ack=True)[2] for _ in range(100)]
        assert drained == [b"before %d" % number for number in range(100)]
        pub._impl.basic_publish("", "work", b"while blocked")  # buffered, not read
        time.sleep(0.2)
        assert con.basic_get("work", auto_ack=True)[0] is None
        broker.call(setattr, broker.broker.config, key, clear)
        broker.call(broker.broker.check_resources)
        assert wait_for(lambda: "unblocked" in events,
                        step=lambda: publisher.process_data_events(0.05))
        assert wait_get(con, "work")[2] == b"while blocked"
        assert broker.broker.alarms == set()
        publisher.close()
        consumer.close()


def test_memory_watermark_is_a_fraction_of_ram_or_an_absolute_size():
    assert resources.memory_limit(0.4, 0, 1000) == 400
    assert resources.memory_limit(0.4, 123, 1000) == 123  # absolute wins when set
    assert resources.memory_limit(0.4, 0, 0) == 0  # RAM unknown: no memory alarm
    assert resources.total_memory() > resources.resident_memory() > 0
