"""What frameworks' own test suites read from the management API, against
this broker and a real RabbitMQ side by side: the bindings of a queue and
of an exchange as source or destination, a queue's consumer_details, and
the keys a message get must name.  Both brokers are set up the same way
over their own HTTP API (and pika), under names of this run, deleted
after it.

Known differences, kept here rather than hidden:
- a properties key's arguments part: RabbitMQ hashes the Erlang term of
  the arguments (erlang:phash2); this broker hashes their encoded bytes.
  Both are six base64url characters that tools read from a listing and
  put back in a URL, so the comparison masks that part only;
- consumer_details: this broker adds `consumer_priority` (RabbitMQ 3.10
  shows it in `arguments` only), and the channel's name, port and node
  name the broker's own connection;
- a get with an unknown ackmode: RabbitMQ answers 500 (its handler
  crashes); this broker answers 400 naming the ackmodes, so it is not
  compared.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pika
import pytest

from .management_api import call
from .waiting import wait_for


def _q(name: str) -> str:
    return quote(name, safe="")


@pytest.fixture
def bases(broker, rabbitmq_url, rabbitmq_management_url):
    return {"ours": (broker.management_url, broker.url),
            "theirs": (rabbitmq_management_url, rabbitmq_url)}


@pytest.fixture
def names(bases):
    """A queue, a topic exchange and a fanout exchange of this run on both
    brokers, bound as in the issue: the topic exchange to the queue three
    ways (one with arguments), the fanout exchange to the topic exchange,
    amq.direct to the queue with a key that needs quoting in a URL."""
    prefix = f"frd.{uuid.uuid4().hex[:8]}"
    made = {"q": f"{prefix}.q", "x": f"{prefix}.x", "y": f"{prefix}.y",
            "spare": f"{prefix}.spare"}
    bindings = (
        ("x", "q", "q", {"routing_key": "", "arguments": {}}),
        ("x", "q", "q", {"routing_key": "a.#", "arguments": {}}),
        ("x", "q", "q", {"routing_key": "b.#", "arguments": {"z": 1}}),
        ("y", "e", "x", {"routing_key": "k"}),
        ("amq.direct", "q", "q", {"routing_key": "a b~c/é%"}),
    )
    for base, _ in bases.values():
        for queue in ("q", "spare"):
            assert call(base, "PUT", f"/api/queues/%2F/{made[queue]}",
                        {"durable": False})[0] == 201
        assert call(base, "PUT", f"/api/exchanges/%2F/{made['x']}",
                    {"type": "topic", "durable": False})[0] == 201
        assert call(base, "PUT", f"/api/exchanges/%2F/{made['y']}",
                    {"type": "fanout", "durable": False})[0] == 201
        for source, kind, destination, body in bindings:
            path = f"/api/bindings/%2F/e/{made.get(source, source)}/{kind}/{made[destination]}"
            assert call(base, "POST", path, body)[0] == 201
    yield made
    for base, _ in bases.values():
        for queue in ("q", "spare"):
            call(base, "DELETE", f"/api/queues/%2F/{made[queue]}")
        for exchange in ("x", "y"):
            call(base, "DELETE", f"/api/exchanges/%2F/{made[exchange]}")


def _masked(answer):
    """An answer with the arguments hash of each properties key masked."""
    status, body = answer
    if not isinstance(body, list):
        return answer
    shown = []
    for binding in body:
        binding = dict(binding)
        if binding.get("arguments"):
            key, _, hashed = binding["properties_key"].partition("~")
            assert len(hashed) == 6, binding
            binding["properties_key"] = f"{key}~<hash>"
        shown.append(binding)
    return status, shown


def listings(base: str, made: dict) -> dict:
    q, x, y = made["q"], made["x"], made["y"]
    paths = {
        "queue": f"/api/queues/%2F/{q}/bindings",
        "queue without bindings": f"/api/queues/%2F/{made['spare']}/bindings",
        "missing queue": f"/api/queues/%2F/{q}.missing/bindings",
        "queue in a missing vhost": f"/api/queues/frd.nowhere/{q}/bindings",
        "exchange as source": f"/api/exchanges/%2F/{x}/bindings/source",
        "exchange as destination": f"/api/exchanges/%2F/{x}/bindings/destination",
        "fanout as source": f"/api/exchanges/%2F/{y}/bindings/source",
        "fanout as destination": f"/api/exchanges/%2F/{y}/bindings/destination",
        "missing exchange as source": f"/api/exchanges/%2F/{x}.missing/bindings/source",
        "missing exchange as destination":
            f"/api/exchanges/%2F/{x}.missing/bindings/destination",
        "exchange in a missing vhost": f"/api/exchanges/frd.nowhere/{x}/bindings/source",
        "between": f"/api/bindings/%2F/e/{x}/q/{q}",
        "between, missing queue": f"/api/bindings/%2F/e/{x}/q/{q}.missing",
        "between, missing exchange": f"/api/bindings/%2F/e/{x}.missing/q/{q}",
        "sorted by routing key, reversed":
            f"/api/queues/%2F/{q}/bindings?sort=routing_key&sort_reverse=true",
    }
    seen = {name: _masked(call(base, "GET", path)) for name, path in paths.items()}
    # The default exchange lists every queue of the vhost: this run's only.
    status, listed = call(base, "GET", "/api/exchanges/%2F/amq.default/bindings/source")
    seen["default exchange as source"] = (status, [
        b for b in listed if b["destination"] in (q, made["spare"])])
    status, listed = call(base, "GET", "/api/bindings/%2F")
    seen["vhost"] = _masked((status, [b for b in listed if b["destination"] in made.values()]))
    return seen


def test_binding_listings_match_rabbitmq(bases, names):
    ours, theirs = (listings(base, names) for base, _ in bases.values())
    assert ours == theirs
    # Not trivially equal: the implicit binding first, then by source and
    # key, a key quoted for URLs, a binding with arguments, an e2e binding.
    queue = ours["queue"][1]
    assert [(b["source"], b["routing_key"]) for b in queue] == [
        ("", names["q"]), ("amq.direct", "a b~c/é%"), (names["x"], ""), (names["x"], "a.#"),
        (names["x"], "b.#")]
    assert [b["properties_key"] for b in queue[1:]] == [
        "a+b%7Ec%2F%C3%A9%25", "~", "a.%23", "b.%23~<hash>"]
    assert ours["exchange as destination"][1][0]["destination_type"] == "exchange"
    assert ours["missing queue"] == (200, [{
        "source": "", "vhost": "/", "destination": f"{names['q']}.missing",
        "destination_type": "queue", "routing_key": f"{names['q']}.missing",
        "arguments": {}, "properties_key": f"{names['q']}.missing"}])
    assert ours["queue in a missing vhost"] == ours["missing exchange as source"] == (200, [])


def unbinding(base: str, made: dict) -> tuple:
    """Each binding of the queue deleted by the properties key it is listed
    with, quoted into the URL as clients do; then what is left."""
    statuses = []
    for binding in call(base, "GET", f"/api/queues/%2F/{made['q']}/bindings")[1]:
        if binding["source"] == "":
            continue
        path = (f"/api/bindings/%2F/e/{binding['source']}/q/{made['q']}/"
                f"{_q(binding['properties_key'])}")
        statuses.append(call(base, "DELETE", path)[0])
    left = call(base, "GET", f"/api/queues/%2F/{made['q']}/bindings")[1]
    return statuses, [b["source"] for b in left]


def test_each_listed_binding_is_deleted_by_its_properties_key_as_in_rabbitmq(bases, names):
    ours, theirs = (unbinding(base, names) for base, _ in bases.values())
    assert ours == theirs == ([204, 204, 204, 204], [""])


def _with_consumer(queue: dict) -> bool:
    """RabbitMQ's statistics know the consumer and its channel (each comes
    in with its own emission, the channel's details last under load)."""
    details = queue.get("consumer_details") or [{}]
    channel = details[0].get("channel_details")
    return (queue.get("consumers") == 1 and isinstance(channel, dict)
            and "connection_name" in channel)


def consumers_shown(base: str, url: str, made: dict) -> dict:
    """A queue's consumer_details (and the listing's lack of them) while a
    pika consumer with a tag, a prefetch and a priority is on it."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=7)
        channel.basic_consume(made["q"], lambda *args: None, consumer_tag="frd-tag",
                              arguments={"x-priority": 3})
        path = f"/api/queues/%2F/{made['q']}"
        # RabbitMQ's management database learns of consumers with its
        # statistics, every few seconds.
        assert wait_for(lambda: _with_consumer(call(base, "GET", path)[1]), seconds=30,
                        step=lambda: conn.process_data_events(0.2)), \
            f"{base} did not show the consumer and its channel in 30 s"
        queue = call(base, "GET", path)[1]
        listed = [q for q in call(base, "GET", "/api/queues/%2F")[1] if q["name"] == made["q"]]
        connections = {c["name"]: c for c in call(base, "GET", "/api/connections")[1]}
    finally:
        conn.close()
    details = queue["consumer_details"]
    shown = []
    for consumer in details:
        consumer = {k: v for k, v in consumer.items() if k != "consumer_priority"}
        channel_details = dict(consumer.pop("channel_details"))
        connection = connections[channel_details.pop("connection_name")]
        assert channel_details.pop("name") == f"{connection['name']} (1)"
        assert channel_details.pop("peer_port") == connection["peer_port"]
        assert channel_details.pop("node") == connection["node"]
        shown.append({**consumer, "channel_details": channel_details})
    return {"consumers": queue["consumers"], "details": shown,
            "listing has details": "consumer_details" in listed[0]}


def test_a_queues_consumer_details_match_rabbitmqs(bases, names):
    ours, theirs = (consumers_shown(base, url, names) for base, url in bases.values())
    assert ours == theirs
    assert ours["details"] == [{
        "consumer_tag": "frd-tag", "queue": {"name": names["q"], "vhost": "/"},
        "ack_required": True, "exclusive": False, "prefetch_count": 7,
        "arguments": {"x-priority": 3}, "active": True, "activity_status": "up",
        "channel_details": {"number": 1, "user": "guest", "peer_host": "127.0.0.1"}}]
    assert ours["listing has details"] is False


GETS = {
    "count only": {"count": 1},
    "the old requeue key": {"count": 1, "requeue": False},
    "the old requeue key, with an encoding": {"count": 1, "requeue": "false",
                                              "encoding": "auto"},
    "nothing": {},
    "no encoding": {"count": 1, "ackmode": "ack_requeue_true"},
    "count not a number": {"count": "x", "ackmode": "ack_requeue_true", "encoding": "auto"},
    "count null": {"count": None, "ackmode": "ack_requeue_true", "encoding": "auto"},
    "unknown encoding": {"count": 1, "ackmode": "ack_requeue_true", "encoding": "nope"},
    "truncate not a number": {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto",
                              "truncate": "x"},
    "count as text, truncated": {"count": "2", "ackmode": "ack_requeue_true",
                                 "encoding": "auto", "truncate": 3},
    "base64": {"count": 1, "ackmode": "ack_requeue_true", "encoding": "base64"},
    "a negative count takes all": {"count": -1, "ackmode": "ack_requeue_true",
                                   "encoding": "auto"},
}
SHOWN = ("payload", "payload_bytes", "payload_encoding", "exchange", "routing_key",
         "message_count", "redelivered")


def gets(base: str, url: str, made: dict) -> dict:
    for payload in ("first", "second"):
        assert call(base, "POST", "/api/exchanges/%2F/amq.default/publish", {
            "routing_key": made["spare"], "payload": payload, "payload_encoding": "string",
            "properties": {}})[1] == {"routed": True}
    seen = {}
    for name, body in GETS.items():
        status, answer = call(base, "POST", f"/api/queues/%2F/{made['spare']}/get", body)
        if status == 200:
            answer = [{key: message[key] for key in SHOWN} for message in answer]
        seen[name] = (status, answer)
    seen["missing queue"] = call(base, "POST", f"/api/queues/%2F/{made['spare']}.missing/get",
                                 {"count": 1, "ackmode": "ack_requeue_true",
                                  "encoding": "auto"})
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        declared = conn.channel().queue_declare(made["spare"], passive=True)
    finally:
        conn.close()
    seen["left"] = declared.method.message_count
    return seen


def test_a_get_names_its_keys_as_rabbitmq_requires_them(bases, names):
    ours, theirs = (gets(base, url, names) for base, url in bases.values())
    assert ours == theirs
    assert ours["the old requeue key"] == (400, {
        "error": "bad_request", "reason": "[{key_missing,ackmode},{key_missing,encoding}]"})
    assert ours["count not a number"] == (400, {"error": "bad_request",
                                                "reason": ["not_integer", "x"]})
    assert len(ours["a negative count takes all"][1]) == 2 and ours["left"] == 2


HEAD_KEYS = ("messages_ready", "messages_unacknowledged", "messages_ram",
             "messages_ready_ram", "messages_unacknowledged_ram", "exclusive_consumer_tag")


def memory_shown(base: str, url: str, made: dict) -> dict:
    """A queue's memory and exclusive-consumer keys while an exclusive
    consumer holds the first of two messages unacknowledged."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        for _ in range(2):
            channel.basic_publish("", made["spare"], b"x")
        channel.basic_qos(prefetch_count=1)
        channel.basic_consume(made["spare"], lambda *args: None, consumer_tag="frd-excl",
                              exclusive=True)
        path = f"/api/queues/%2F/{made['spare']}"
        shown: dict = {}

        def settled() -> bool:
            # RabbitMQ's figures come with its statistics, every few
            # seconds, each kind in its own emission: one answer that has
            # them all.
            shown.clear()
            shown.update(call(base, "GET", path)[1])
            return (shown.get("messages_unacknowledged") == 1
                    and shown.get("messages_ready") == 1 and shown.get("messages_ram") == 2)
        assert wait_for(settled, seconds=60, step=lambda: conn.process_data_events(0.2)), \
            f"{base} did not show the delivery in 60 s: {shown}"
        queue = shown
    finally:
        conn.close()
    return {key: queue.get(key, "missing") for key in HEAD_KEYS}


def test_a_queues_memory_and_exclusive_consumer_keys_match_rabbitmq(bases, names):
    theirs, ours = (memory_shown(*bases[side], names) for side in ("theirs", "ours"))
    assert ours == theirs
    assert theirs["exclusive_consumer_tag"] == "frd-excl" and theirs["messages_ram"] == 2
