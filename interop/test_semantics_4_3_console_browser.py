"""The web console shows a RabbitMQ 4.3 quorum queue as 4.3's management UI
does (4.3.0's release notes: delayed retry configuration and status,
per-priority counts), in a real browser (Debian's chromium)."""

from __future__ import annotations

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .browser import Console, start_chromium
from .management_api import amqpctl
from .waiting import wait_get_noack


@pytest.fixture
def broker():
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3")) as running:
        yield running


@pytest.fixture
def console(broker):
    driver = start_chromium()
    yield Console(driver, broker.management_url)
    driver.quit()


def facts(console) -> dict[str, str]:
    """The queue page's settings card, label -> value."""
    rows = console.css("#queue-about tr")
    return {row.find_elements(console.by.TAG_NAME, "th")[0].text:
            row.find_elements(console.by.TAG_NAME, "td")[0].text for row in rows}


def test_a_4_3_quorum_queue_page_shows_its_limit_retry_and_priorities(broker, console):
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("jobs", durable=True, arguments={"x-queue-type": "quorum"})
    assert amqpctl(broker, "set_policy", "retry", "^jobs$",
                   '{"delayed-retry-type": "all", "delayed-retry-min": 600000}',
                   "--apply-to", "quorum_queues") == 0
    for body, priority in ((b"a", 9), (b"b", None), (b"c", None), (b"d", 1)):
        channel.basic_publish("", "jobs", body, pika.BasicProperties(priority=priority))
    method, _, _ = wait_get_noack(channel, "jobs")  # the priority 9 one
    channel.basic_reject(method.delivery_tag, requeue=True)  # waits 10 minutes
    console.login("guest", "guest")
    console.driver.get(f"{console.base}/?view#/queues/%2F/jobs")
    console.until(lambda: console.text("queue-title") == "jobs (/)")
    console.until(lambda: facts(console).get("Delayed retry")
                  == "all (min: 600000ms, max: 600000ms)")
    shown = facts(console)
    assert shown["Delivery limit"] == "20"
    assert shown["Ready by priority"] == "4: 2, 1: 1"
    assert shown["Returned, served first"] == "0"
    assert shown["Next delayed retry at"] != "none waiting"
    connection.close()


def test_a_3_13_queue_page_has_none_of_it(console):
    with BrokerThread() as plain:
        connection = pika.BlockingConnection(pika.URLParameters(plain.url))
        connection.channel().queue_declare("jobs", durable=True,
                                           arguments={"x-queue-type": "quorum"})
        connection.close()
        other = Console(console.driver, plain.management_url)
        other.login("guest", "guest")
        other.driver.get(f"{other.base}/?view#/queues/%2F/jobs")
        other.until(lambda: "Type" in facts(other))
        assert "Delivery limit" not in facts(other)
