"""The web console and the dead-letter workbench in a real browser
(Debian's chromium through Selenium), against a broker in this process that
pika fills: users see what their tags and permissions allow, dead letters
made by the broker itself are browsed, filtered and redriven, connections
closed, policy errors shown."""

from __future__ import annotations

import json

import pika
import pytest
from pika.exceptions import AMQPConnectionError

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .browser import Console, start_chromium
from .test_access import ctl
from .test_management import http
from .test_workbench_api import count, wait_get_noack
from .waiting import wait_for

PW = "pw"


@pytest.fixture(scope="module")
def chromium():
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture
def console(broker, chromium):
    return Console(chromium, broker.management_url)


def add_user(broker, name: str, tags: str, vhost: str | None = None) -> None:
    assert ctl(broker, "add_user", name, PW) == 0
    assert ctl(broker, "set_user_tags", name, *tags.split()) == 0
    if vhost is not None:
        assert ctl(broker, "set_permissions", "-p", vhost, name, ".*", ".*", ".*") == 0


def dead_letters_of_every_kind(channel) -> None:
    """orders.dlq (through fanout dlx) receives one message rejected from
    `orders`, one expired in `orders.ttl`, one pushed out of `orders.capped`
    by its length limit; all published through exchange `shop`."""
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("orders.dlq", durable=True)
    channel.queue_bind("orders.dlq", "dlx")
    channel.exchange_declare("shop", "direct")
    for queue, key, extra in (("orders", "order", {}), ("orders.ttl", "ttl", {"x-message-ttl": 1}),
                              ("orders.capped", "capped", {"x-max-length": 1})):
        channel.queue_declare(queue, durable=True,
                              arguments={"x-dead-letter-exchange": "dlx", **extra})
        channel.queue_bind(queue, "shop", key)
    channel.confirm_delivery()

    def send(key: str, message_id: str, body: bytes) -> None:
        channel.basic_publish("shop", key, body, pika.BasicProperties(
            message_id=message_id, delivery_mode=2, content_type="application/json",
            headers={"trace": message_id}))

    send("order", "rejected-1", b'{"sku": "A-1", "qty": 2}')
    method, _props, _body = wait_get_noack(channel, "orders")
    channel.basic_reject(method.delivery_tag, requeue=False)
    send("ttl", "expired-1", b'{"sku": "B-2"}')
    assert wait_for(lambda: count(channel, "orders.dlq") == 2, 10)
    send("capped", "maxlen-1", b"\x00\x01 not text \xff")
    send("capped", "kept-1", b'{"sku": "C-3"}')
    assert wait_for(lambda: count(channel, "orders.dlq") == 3, 10)
    # The survivor leaves, so that a redriven message finds room again.
    assert wait_get_noack(channel, "orders.capped")[2] == b'{"sku": "C-3"}'


def row_of(console: Console, message_id: str):
    rows = console.css(f'#messages tbody tr[data-message-id="{message_id}"]')
    assert len(rows) == 1, message_id
    return rows[0]


def test_log_in_with_the_brokers_users_and_see_only_what_tags_and_permissions_allow(
        broker, console):
    assert ctl(broker, "add_vhost", "other") == 0
    add_user(broker, "mandy", "management", "other")
    add_user(broker, "nobody", "")
    assert http(broker, "PUT", "/api/queues/%2F/DLQ.secret", {})[0] == 201
    assert http(broker, "PUT", "/api/queues/other/DLQ.theirs", {})[0] == 201

    console.login("guest", "wrong", refused=True)
    console.until(lambda: "Login failed" in console.text("login-error"))
    console.login("nobody", PW, refused=True)
    console.until(lambda: console.text("login-error") == "Not management user")

    console.login("mandy", PW)
    console.open("queues")
    console.shows("queues", "Name", ["DLQ.theirs"])
    console.open("dead-letters")
    console.shows("dead-letter-queues", "Name", ["DLQ.theirs"])
    assert not console.find("nav-admin").is_displayed()
    console.open("admin")
    console.until(lambda: "for administrators" in console.find("view").text)
    # The workbench of a queue in a vhost it may not see says so.
    console.open("dead-letters/%2F/DLQ.secret")
    console.until(lambda: console.text("workbench-error") ==
                  "User not authorised to access virtual host")
    assert console.css("#messages tbody tr") == []

    console.login("guest", "guest")
    console.open("queues")
    console.shows("queues", "Name", ["DLQ.secret", "DLQ.theirs"])
    console.find("queues-filter").send_keys("their")
    console.shows("queues", "Name", ["DLQ.theirs"])
    console.open("admin")
    console.until(lambda: {"guest", "mandy", "nobody"} <= set(console.column("users", "Name") or ()))
    assert set(console.column("vhosts", "Name")) == {"/", "other"}


def test_tables_sort_by_a_clicked_column(broker, console, channel):
    for name, depth in (("b.two", 2), ("a.three", 3), ("c.one", 1)):
        channel.queue_declare(name)
        for _ in range(depth):
            channel.basic_publish("", name, b"x")
    assert wait_for(lambda: count(channel, "a.three") == 3)
    console.login("guest", "guest")
    console.open("queues")
    console.shows("queues", "Name", ["a.three", "b.two", "c.one"])
    header = console.css('#queues th[data-column="Ready"]')[0]
    header.click()
    console.shows("queues", "Name", ["c.one", "b.two", "a.three"])
    header.click()
    console.shows("queues", "Name", ["a.three", "b.two", "c.one"])


def test_workbench_browses_filters_and_redrives_dead_letters_back_with_their_history(
        broker, console, channel):
    dead_letters_of_every_kind(channel)
    console.login("guest", "guest")
    console.open("dead-letters")
    console.shows("dead-letter-queues", "Name", ["orders.dlq"])
    console.css("#dead-letter-queues a")[0].click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    assert console.column("messages", "Reason") == ["rejected", "expired", "maxlen"]
    assert console.column("messages", "Original queue") == ["orders", "orders.ttl",
                                                            "orders.capped"]

    # A message's history, properties, headers and body.
    row_of(console, "rejected-1").click()
    console.until(lambda: console.find("timeline").is_displayed())
    steps = [li.text for li in console.css("#timeline li")]
    assert steps[0].startswith("Published to exchange shop with routing keys order")
    assert steps[1].startswith("orders rejected") and "via exchange shop, keys order" in steps[1]
    # x-death keeps the time of the first death of its kind: said as such.
    assert ", first at " in steps[1] and "last at" not in steps[1]
    assert "First died" in [th.text for th in console.css("#messages th")]
    assert steps[-1] == "Now in orders.dlq"
    assert json.loads(console.text("headers"))["trace"] == "rejected-1"
    assert console.text("body-view") == json.dumps({"sku": "A-1", "qty": 2}, indent=2)
    console.find("body-text").click()
    assert console.text("body-view") == '{"sku": "A-1", "qty": 2}'
    row_of(console, "maxlen-1").click()
    console.until(lambda: console.text("body-view").startswith(
        "00000000  00 01 20 6e 6f 74 20 74"))
    assert "maxlen" in console.css("#timeline li")[1].text

    # Filters: by reason, by body, cleared.
    console.find("filter-reason").send_keys("expired")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["expired-1"])
    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    console.type("filter-body", "sku")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1"])
    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])

    # Redrive two selected messages: each goes back where it was published.
    for message_id in ("rejected-1", "maxlen-1"):
        row_of(console, message_id).find_element(console.by.CSS_SELECTOR, "input.pick").click()
    assert "(2)" in console.find("action-scope").text
    console.find("action-redrive").click()
    console.until(lambda: console.find("task-status").get_attribute("data-state") == "completed")
    assert console.text("task-status").startswith(
        "redrive completed: 2 of 2 done; 2 moved, 0 failed")
    console.shows("messages", "Message id", ["expired-1"])

    _method, props, body = wait_get_noack(channel, "orders")
    assert body == b'{"sku": "A-1", "qty": 2}' and props.message_id == "rejected-1"
    death = props.headers["x-death"][0]
    assert (death["queue"], death["reason"], death["count"]) == ("orders", "rejected", 1)
    _method, props, body = wait_get_noack(channel, "orders.capped")
    assert body == b"\x00\x01 not text \xff"
    assert props.headers["x-death"][0]["reason"] == "maxlen"
    assert count(channel, "orders.dlq") == 1


def test_move_and_delete_all_filtered_messages_with_progress(broker, console, channel):
    dead_letters_of_every_kind(channel)
    channel.queue_declare("parking")
    console.login("guest", "guest")
    console.open("dead-letters/%2F/orders.dlq")
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    console.find("filter-reason").send_keys("expired")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["expired-1"])
    console.find("action-scope").send_keys("all")
    console.type("move-exchange", "")
    console.type("move-routing-key", "parking")
    console.find("action-move").click()
    console.until(lambda: console.find("task-status").get_attribute("data-state") == "completed")
    assert wait_get_noack(channel, "parking")[2] == b'{"sku": "B-2"}'

    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "maxlen-1"])
    console.find("action-scope").send_keys("all")
    delete = console.find("action-delete")
    delete.click()
    assert delete.text == "Confirm delete"
    delete.click()
    console.until(lambda: console.text("task-status").startswith(
        "delete completed: 2 of 2 done; 2 deleted"))
    console.shows("messages", "Message id", [])
    assert count(channel, "orders.dlq") == 0


def test_close_a_connection_from_the_connections_page(broker, console):
    client = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        console.login("guest", "guest")
        console.open("connections")
        console.until(lambda: len(console.column("connections", "Name") or ()) == 1)
        close = console.css("#connections button")[0]
        close.click()
        close.click()
        console.shows("connections", "Name", [])

        def closed() -> bool:
            try:
                client.process_data_events(0.05)
            except AMQPConnectionError:
                return True
            return not client.is_open
        assert wait_for(closed, 10)
    finally:
        if client.is_open:
            client.close()


def test_policies_are_set_with_their_validation_errors_shown_and_cleared(broker, console):
    console.login("guest", "guest")
    console.open("policies")
    console.type("policy-name", "bad")
    console.type("policy-definition", '{"dead-letter-exchanges": "dlx"}')
    console.find("policy-submit").click()
    console.until(lambda: "are not recognised policy settings" in console.text("policy-error"))
    assert console.text("policy-error").startswith("Validation failed")
    console.type("policy-definition", "{not json")
    console.find("policy-submit").click()
    console.until(lambda: console.text("policy-error").startswith("The definition is not JSON"))
    assert http(broker, "GET", "/api/policies")[1] == []

    console.type("policy-name", "dead")
    console.type("policy-pattern", "^orders$")
    console.type("policy-definition", '{"dead-letter-exchange": "dlx"}')
    console.find("policy-submit").click()
    console.shows("policies", "Name", ["dead"])
    assert console.text("policy-error") == ""
    assert http(broker, "GET", "/api/policies/%2F/dead")[1]["definition"] == {
        "dead-letter-exchange": "dlx"}
    clear = console.css('#policies button[data-policy="dead"]')[0]
    clear.click()
    clear.click()
    console.shows("policies", "Name", [])
    assert http(broker, "GET", "/api/policies")[1] == []


def test_overview_shows_alarms_and_dead_letters_per_minute_live(chromium):
    config = BrokerConfig(port=0, management_port=0, vm_memory_high_watermark_absolute=1)
    with BrokerThread(config) as broker:
        console = Console(chromium, broker.management_url)
        console.login("guest", "guest")
        console.open("overview")
        console.until(lambda: "memory alarm" in console.text("overview-alarms"))
        console.until(lambda: console.text("dead-rejected").startswith("0.0"))
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            channel = connection.channel()
            channel.queue_declare("work", arguments={"x-dead-letter-exchange": "",
                                                     "x-dead-letter-routing-key": "work.dlq"})
            channel.queue_declare("work.dlq")
            # Consuming still works under a memory alarm: deliver and reject
            # what is there (the queue is filled by the broker's own API).
            assert http(broker, "POST", "/api/exchanges/%2F/amq.default/publish",
                        {"routing_key": "work", "payload": "x", "payload_encoding": "string",
                         "properties": {}})[1] == {"routed": True}
            method, _props, _body = wait_get_noack(channel, "work")
            channel.basic_reject(method.delivery_tag, requeue=False)
            # The next reading turns the count into a rate above zero.
            console.until(lambda: "1 in all" in console.text("dead-rejected")
                          and float(console.text("dead-rejected").split()[0]) > 0)
        finally:
            connection.close()
