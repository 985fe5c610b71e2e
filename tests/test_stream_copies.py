"""A dead letter a stream holds, read back as a dead-letter log event
(dlx/stream_copies.py): the fields the broker's log writer would write for
the same message, from the same stored header and body."""

from __future__ import annotations

import json
import struct

from amqp_server.storage import records
from amqp_server.storage.dead_letter_lines import event_line, node_member
from amqp_server.wire.frames import shortstr
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable
from dlx.deaths import DeathHistory, record_death, render_headers
from dlx.stream_copies import dead_letter_event, event_id, events_of_records, route_parts

BODY = b'{"sku": "A-1"}'


def stored_header(headers: FieldTable | None, **props) -> bytes:
    """A content header as the broker stores it (class, weight, body size,
    then the properties)."""
    return struct.pack(">HHQ", 60, 0, len(BODY)) + encode_properties(
        Properties(headers=headers, **props))


def died_twice() -> DeathHistory:
    history = record_death(DeathHistory(), "orders", "rejected", "shop", ("order",), None,
                           1_700_000_000)
    return record_death(history, "orders", "rejected", "shop", ("order",), None, 1_700_000_050)


def test_a_copy_with_x_death_is_the_event_of_its_latest_death():
    headers = FieldTable({"trace": "t-1"})
    header = stored_header(render_headers(headers, died_twice()), message_id="m-1",
                           correlation_id="c-1", delivery_mode=2, timestamp=1_699_999_999)
    event = dead_letter_event("/", "dead.stream", 41, 1_700_000_060_123.0,
                              shortstr("dlx") + shortstr("orders"), header, BODY)
    assert event is not None
    assert (event["vhost"], event["queue"], event["reason"]) == ("/", "orders", "rejected")
    assert event["time"] == 1_700_000_060_123_000  # when the stream took it, in µs
    assert event["outcome"] == "dead_lettered" and event["drop_cause"] is None
    assert (event["exchange"], event["routing_keys"]) == ("shop", ["order"])
    assert event["dead_letter_exchange"] == "dlx"
    assert event["dead_letter_routing_keys"] == ["orders"]
    assert event["target_queues"] == ["dead.stream"]
    (death,) = event["deaths"]
    assert (death["count"], death["time"]) == (2, 1_700_000_000 * 1_000_000)
    assert event["first_death_queue"] == "orders"
    assert event["message_id"] == "m-1" and event["correlation_id"] == "c-1"
    assert event["event_id"] == event_id("/", "dead.stream", 41)
    assert event["body_size"] == len(BODY) and event["body_included"] is True


def test_properties_headers_and_body_are_written_as_the_log_writes_them():
    header = stored_header(render_headers(FieldTable({"trace": "t-1", "n": 3}), died_twice()),
                           message_id="m-1", priority=4, timestamp=1_699_999_999)
    event = dead_letter_event("/", "s", 0, 0.0, shortstr("") + shortstr("k"), header, BODY)
    line = json.loads(event_line('{"queue":"orders"', header, BODY, 64 << 10,
                                 node_member("n"), "x-1"))
    for name in ("message_id", "correlation_id", "properties", "headers", "body_size",
                 "body_sha256", "body", "body_included"):
        assert event[name] == line[name], name


def test_a_message_that_never_died_is_no_event():
    header = stored_header(FieldTable({"i": 1}), message_id="plain")
    assert dead_letter_event("/", "s", 0, 0.0, shortstr("") + shortstr("s"), header,
                             BODY) is None
    assert dead_letter_event("/", "s", 0, 0.0, shortstr("") + shortstr("s"),
                             stored_header(None), BODY) is None


def test_a_segments_records_give_the_events_of_their_dead_letters():
    dead = stored_header(render_headers(None, died_twice()), message_id="dead")
    plain = stored_header(None, message_id="plain")
    route = shortstr("dlx") + shortstr("")
    data = b"".join(records.encode(["S", offset, 1000.0, route, header, BODY])
                    for offset, header in enumerate((plain, dead, plain, dead)))
    decoded, problems, _ = records.decode_all(data + b"\xa5\x5a torn")
    assert len(problems) == 1  # the torn tail: left out
    events = events_of_records("v", "s", decoded)
    assert [e["event_id"] for e in events] == [event_id("v", "s", 1), event_id("v", "s", 3)]


def test_a_route_is_two_short_strings():
    assert route_parts(shortstr("dlx") + shortstr("to.stream")) == ("dlx", "to.stream")
    assert route_parts(shortstr("") + shortstr("")) == ("", "")
