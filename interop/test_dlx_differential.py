"""Dead-lettering, scenario by scenario, against this broker and a real
RabbitMQ: the dead-lettered messages must arrive in the same queues with the
same headers, values and wire types (timestamps aside).

Messages are set up with pika and read back with a raw basic.get, because
pika's decoder forgets wire types (a `long` and a `signedint` both become
int) and the types are part of what must match.

Known differences with Debian's RabbitMQ 3.10, kept visible:
- `x-last-death-reason/queue/exchange` are 3.13 headers; 3.10 does not set
  them, so they are removed from our observations before comparing (their
  values are checked in test_dlx_pika.py).
- x-death order after deaths in three queues: 3.10 reorders the older
  entries; 3.13 and its documentation keep strict most-recent-first, and so
  do we (test_three_queue_history_order checks both sides).
- basic.get from a quorum queue: 3.10 adds `x-delivery-count: 0` to a first
  delivery; 3.13 (rabbit_fifo_client:add_delivery_count_header) and we add
  it only once the count is above 0.
"""

from __future__ import annotations

import pika
import pytest

from .differential import Scenario, both, same

# ---- one per trigger -------------------------------------------------------

def test_rejected(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.fanout_dlq()
        src = s.queue("src", x_dead_letter_exchange="dlx")
        s.publish("", src, headers={"app": "kept", "n": 7}, message_id="m1",
                  expiration="60000", content_type="text/plain", delivery_mode=2)
        s.reject("src")
        s.publish("", src, body=b"second")
        s.reject("src", nack=True)
        return [s.look("dlq"), s.look("dlq"), s.empty("src")]
    seen = same(broker, rabbitmq_url, scenario)
    death = seen[0]["headers"]["x-death"][1][0][1]
    assert death["reason"] == ("longstr", "rejected")
    assert death["count"] == ("long", 1)
    assert death["original-expiration"] == ("longstr", "60000")
    assert "expiration" not in seen[0]["properties"]


def test_expired_queue_ttl_and_message_ttl(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.fanout_dlq()
        src = s.queue("src", x_dead_letter_exchange="dlx", x_message_ttl=50)
        s.publish("", src, body=b"queue-ttl")
        first = s.look("dlq")
        plain = s.queue("plain", x_dead_letter_exchange="dlx")
        s.publish("", plain, body=b"message-ttl", expiration="30")
        second = s.look("dlq")
        return [first, second]
    seen = same(broker, rabbitmq_url, scenario)
    assert seen[0]["headers"]["x-first-death-reason"] == ("longstr", "expired")
    assert seen[1]["headers"]["x-death"][1][0][1]["original-expiration"] == ("longstr", "30")


def test_maxlen_drop_head_and_reject_publish_dlx(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.fanout_dlq()
        head = s.queue("head", x_dead_letter_exchange="dlx", x_max_length=1)
        s.publish("", head, body=b"one")
        s.publish("", head, body=b"two")
        dropped = s.look("dlq")
        remaining = s.look("head")
        rej = s.queue("rej", x_dead_letter_exchange="dlx", x_max_length=1,
                      x_overflow="reject-publish-dlx")
        s.publish("", rej, body=b"three")
        s.publish("", rej, body=b"four")
        refused = s.look("dlq")
        kept = s.look("rej")
        return [dropped, remaining, refused, kept]
    seen = same(broker, rabbitmq_url, scenario)
    assert [m["body"] for m in seen] == [b"one", b"two", b"four", b"three"]


def test_reject_publish_nacks_and_dead_letters_nothing(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.fanout_dlq()
        q = s.queue("q", x_dead_letter_exchange="dlx", x_max_length=1,
                    x_overflow="reject-publish")
        s.ch.confirm_delivery()
        outcomes = []
        for body in (b"a", b"b"):
            try:
                s.ch.basic_publish("", q, body)
                outcomes.append("ack")
            except pika.exceptions.NackError:
                outcomes.append("nack")
        return [outcomes, s.empty("dlq"), s.look("q")["body"]]
    assert same(broker, rabbitmq_url, scenario)[0] == ["ack", "nack"]


# ---- routing of dead letters --------------------------------------------------

def test_routing_key_override_removes_cc(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.exchange("dlx", "direct")
        s.queue("by-override")
        s.queue("by-cc")
        s.bind("by-override", "dlx", "override")
        s.bind("by-cc", "dlx", "cc-key")
        src = s.queue("src", x_dead_letter_exchange="dlx",
                      x_dead_letter_routing_key="override")
        s.publish("", src, headers={"CC": ["cc-key"]})
        s.reject("src")
        return [s.look("by-override"), s.empty("by-cc")]
    seen = same(broker, rabbitmq_url, scenario)
    assert "CC" not in seen[0]["headers"]


def test_original_keys_with_cc_and_bcc(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.exchange("in", "direct")
        s.exchange("dlx", "direct")
        s.queue("src", x_dead_letter_exchange="dlx")
        for key in ("main", "cc-key", "bcc-key"):
            s.bind("src", "in", key)
        s.queue("dl-main")
        s.queue("dl-cc")
        s.queue("dl-bcc")
        s.bind("dl-main", "dlx", "main")
        s.bind("dl-cc", "dlx", "cc-key")
        s.bind("dl-bcc", "dlx", "bcc-key")
        s.publish(s.name("in"), "main", headers={"CC": ["cc-key"], "BCC": ["bcc-key"]})
        delivered = s.look("src")  # what a consumer sees: no BCC header
        s.publish(s.name("in"), "main", headers={"CC": ["cc-key"], "BCC": ["bcc-key"]})
        s.reject("src")
        return [delivered, s.look("dl-main"), s.look("dl-cc"), s.look("dl-bcc")]
    seen = same(broker, rabbitmq_url, scenario)
    assert "BCC" not in seen[0]["headers"]
    keys = seen[1]["headers"]["x-death"][1][0][1]["routing-keys"]
    assert keys == ("array", [("longstr", "main"), ("longstr", "cc-key")])


def test_repeated_deaths_in_two_queues(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.queue("a", x_dead_letter_exchange="", x_dead_letter_routing_key="b")
        s.queue("b", x_dead_letter_exchange="", x_dead_letter_routing_key="a")
        s.publish("", s.name("a"), body=b"ping-pong")
        for queue in ("a", "b", "a", "b", "a"):
            s.reject(queue)
        return [s.look("b")]
    seen = same(broker, rabbitmq_url, scenario)
    deaths = seen[0]["headers"]["x-death"][1]
    assert [(d[1]["queue"][1], d[1]["count"][1]) for d in deaths] == [("<p>a", 3), ("<p>b", 2)]


def test_three_queue_history_order(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.queue("a", x_dead_letter_exchange="", x_dead_letter_routing_key="b")
        s.queue("b", x_dead_letter_exchange="", x_dead_letter_routing_key="c")
        s.queue("c", x_dead_letter_exchange="", x_dead_letter_routing_key="a")
        s.publish("", s.name("a"))
        for queue in ("a", "b", "c", "a", "b"):
            s.reject(queue)
        deaths = s.look("c")["headers"]["x-death"][1]
        return [(d[1]["queue"][1], d[1]["count"][1]) for d in deaths]
    ours, theirs = both(broker, rabbitmq_url, scenario)
    # Most recent first: b (2nd death there), then a (its 2nd), then c.
    assert ours == [("<p>b", 2), ("<p>a", 2), ("<p>c", 1)]
    # The same entries and counts; 3.10 orders the older ones differently.
    assert sorted(theirs) == sorted(ours) and theirs[0] == ours[0]


def test_cycle_without_rejection_is_dropped(broker, rabbitmq_url):
    def scenario(s: Scenario):
        # Expiring back into itself through the default exchange: a cycle.
        q = s.queue("loop", x_dead_letter_exchange="", x_message_ttl=20)
        s.publish("", q)
        return [s.empty("loop", settle=0.5)]
    assert same(broker, rabbitmq_url, scenario) == [True]


def test_cycle_with_rejection_continues(broker, rabbitmq_url):
    def scenario(s: Scenario):
        q = s.queue("loop", x_dead_letter_exchange="")
        s.publish("", q)
        s.reject("loop")
        s.reject("loop")
        return [s.look("loop")]
    seen = same(broker, rabbitmq_url, scenario)
    assert seen[0]["headers"]["x-death"][1][0][1]["count"] == ("long", 2)


def test_missing_dlx_drops_and_queue_keeps_working(broker, rabbitmq_url):
    def scenario(s: Scenario):
        q = s.queue("q", x_dead_letter_exchange="does-not-exist")
        s.publish("", q, body=b"lost")
        s.reject("q")
        s.publish("", q, body=b"next")
        return [s.look("q")]
    assert same(broker, rabbitmq_url, scenario)[0]["body"] == b"next"


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_dlx_of_each_exchange_type(broker, rabbitmq_url, kind):
    def scenario(s: Scenario):
        s.exchange("dlx", kind)
        s.queue("dlq")
        if kind == "headers":
            s.bind("dlq", "dlx", "", arguments={"x-match": "any", "kind": "poison"})
        else:
            s.bind("dlq", "dlx", {"direct": "rk", "fanout": "", "topic": "r.#"}[kind])
        src = s.queue("src", x_dead_letter_exchange="dlx")
        key = {"topic": "r.k"}.get(kind, "rk")
        s.ch.queue_bind(src, "amq.direct", key)
        s.publish("amq.direct", key, headers={"kind": "poison"})
        s.reject("src")
        return [s.look("dlq")]
    seen = same(broker, rabbitmq_url, scenario)
    assert seen[0]["exchange"] == "<p>dlx"


def test_quorum_delivery_limit(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.fanout_dlq()
        s.queue("qq", x_queue_type="quorum", x_delivery_limit=1, x_dead_letter_exchange="dlx")
        s.publish("", s.name("qq"), body=b"poison")
        seen = []
        for _ in range(2):
            method, props, _ = s.get("qq")
            count = (props.headers or {}).get("x-delivery-count") or None  # 3.10: 0 on get
            seen.append((method.redelivered, count))
            s.ch.basic_nack(method.delivery_tag, requeue=True)
        return [seen, s.look("dlq"), s.empty("qq")]
    seen = same(broker, rabbitmq_url, scenario)
    assert seen[0] == [(False, None), (True, 1)]
    assert seen[1]["headers"]["x-death"][1][0][1]["reason"] == ("longstr", "delivery_limit")


# ---- refusals ------------------------------------------------------------------

BAD_DECLARES = [
    dict(arguments={"x-message-ttl": -1}),
    dict(arguments={"x-message-ttl": "5"}),
    dict(arguments={"x-expires": 0}),
    dict(arguments={"x-max-length": True}),
    dict(arguments={"x-overflow": "sideways"}),
    dict(arguments={"x-dead-letter-routing-key": "k"}),
    dict(arguments={"x-dead-letter-exchange": 5}),
    dict(arguments={"x-queue-type": "lazy"}),
    dict(arguments={"x-delivery-limit": 3}),
    dict(arguments={"x-queue-type": "quorum"}),
    dict(durable=True, arguments={"x-queue-type": "quorum", "x-max-priority": 3}),
    dict(durable=True, exclusive=True, arguments={"x-queue-type": "quorum"}),
    dict(durable=True, auto_delete=True, arguments={"x-queue-type": "quorum"}),
]


def test_bad_arguments_and_expirations_get_rabbitmq_errors(broker, rabbitmq_url):
    def scenario(s: Scenario):
        seen = []
        for n, declare in enumerate(BAD_DECLARES):
            channel = s.conn.channel()
            try:
                channel.queue_declare(s.name(f"bad{n}"), **declare)
                seen.append("declared")
                s.queues.append(s.name(f"bad{n}"))
            except pika.exceptions.ChannelClosedByBroker as exc:
                seen.append((exc.reply_code, exc.reply_text.replace(s.prefix, "<p>")))
        target = s.queue("e")
        for expiration in ("soon", "-5", "10s", "", "315360000001"):
            channel = s.conn.channel()
            try:
                channel.basic_publish("", target, b"x", pika.BasicProperties(expiration=expiration))
                channel.queue_declare(target, passive=True)
                seen.append("published")
            except pika.exceptions.ChannelClosedByBroker as exc:
                seen.append((exc.reply_code, exc.reply_text))
        return seen
    seen = same(broker, rabbitmq_url, scenario)
    assert "declared" not in seen and "published" not in seen
