"""The dead-letter log as the Spark audit will read it: one JSON line per
death, every declared field present, drops included with their cause."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pika

from amqp_server.storage.dead_letter_log import LogFiles
from dlx.events import FIELD_NAMES

from .dead_letters import read_events


def test_every_death_is_logged(broker, channel):
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dlq")
    channel.queue_bind("dlq", "dlx")
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    channel.queue_declare("plain")
    channel.basic_publish("", "work", b"poison", pika.BasicProperties(
        message_id="m-1", correlation_id="c-1", headers={"tenant": "acme", "n": 3},
        content_type="text/plain"))
    channel.basic_publish("", "plain", b"lost")
    for queue in ("work", "plain"):
        method, _, _ = channel.basic_get(queue)
        channel.basic_reject(method.delivery_tag, requeue=False)
    events = read_events(broker, 2)
    assert len(events) == 2
    for event in events:
        assert set(event) == set(FIELD_NAMES)
    dead, dropped = sorted(events, key=lambda e: e["queue"] != "work")
    assert dead["outcome"] == "dead_lettered" and dead["reason"] == "rejected"
    assert dead["target_queues"] == ["dlq"] and dead["dead_letter_exchange"] == "dlx"
    assert dead["message_id"] == "m-1" and dead["correlation_id"] == "c-1"
    assert dead["headers"] == {"tenant": '"acme"', "n": "3"}
    assert dead["properties"]["content_type"] == '"text/plain"'
    assert dead["deaths"][0]["queue"] == "work" and dead["deaths"][0]["count"] == 1
    assert dead["first_death_reason"] == "rejected"
    assert base64.b64decode(dead["body"]) == b"poison"
    assert dead["body_sha256"] == hashlib.sha256(b"poison").hexdigest()
    assert abs(dead["time"] / 1e6 - time.time()) < 60
    assert dropped["outcome"] == "dropped" and dropped["drop_cause"] == "no_dlx"
    assert dropped["target_queues"] == []


def test_files_roll_and_retention_bounds_them(tmp_path):
    files = LogFiles(tmp_path, max_file_bytes=100, max_file_seconds=3600, retention_bytes=350)
    for n in range(10):
        files.write([json.dumps({"n": n, "pad": "x" * 60}) + "\n"])
    files.close()
    kept = sorted(tmp_path.glob("*.ndjson"))
    assert 1 < len(kept) < 10
    assert sum(p.stat().st_size for p in kept) <= 350 + 100
    last = json.loads(kept[-1].read_text().splitlines()[-1])
    assert last["n"] == 9


def test_names_that_are_not_utf8_are_logged_as_json(broker):
    """A raw client may name a queue with any bytes; its deaths still become
    JSON lines (found by the fuzz harness: the writer used to fail)."""
    from pamqp import commands as spec

    from amqp_server.wire import frames
    from amqp_server.wire.methods import make
    from interop.rawclient import RawClient

    client = RawClient.for_url(broker.url)
    name = b"bad\xff".decode("utf-8", "surrogateescape")
    client.send_method(1, make(spec.Queue.Declare, queue=name))
    client.read_method()
    client.publish(1, "", name, frames.content_header(4, b"\x00\x00"), b"body")
    client.send_method(1, make(spec.Basic.Get, queue=name))
    _, get_ok = client.read_method()
    client.read_frame(), client.read_frame()
    client.send_method(1, make(spec.Basic.Reject, delivery_tag=get_ok.delivery_tag,
                               requeue=False))
    client.send_method(1, make(spec.Queue.Declare, queue="after", passive=False))
    client.read_method()  # the channel is still open: nothing failed
    events = read_events(broker, 1)
    assert [event["queue"] for event in events] == [name]
    client.close()
