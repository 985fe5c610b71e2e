"""Every dead-letter event names the broker that wrote it (`node`), so the
audit can read many brokers' logs as one: the name comes from the broker's
`node_name` (TOML), the host name by default."""

from __future__ import annotations

import json
import socket

from amqp_server.broker.dead_letter_events import event_common, event_head
from amqp_server.broker.message import Message
from amqp_server.config import BrokerConfig
from amqp_server.storage.dead_letter_log import DeadLetterLog
from amqp_server.wire.frames import content_header
from amqp_server.wire.properties import Properties, encode_properties
from dlx.events import FIELD_NAMES


def _die(log: DeadLetterLog, body: bytes) -> None:
    header = content_header(len(body), encode_properties(Properties(message_id="m-1")))
    message = Message.to("orders", "work", header, body)
    common = event_common("/", "work", "rejected", message.letter(), "dlx", 1_700_000_000)
    log.record(event_head(common, 1_700_000_000.5, None, ["dlq"]), header, body)


def _events(directory) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("*.ndjson"))
            for line in path.read_text().splitlines()]


def test_every_event_carries_the_node_it_was_written_by(tmp_path):
    log = DeadLetterLog(tmp_path, node='broker "eu" 1')
    _die(log, b"poison")
    _die(log, b"again")
    log.close()
    events = _events(tmp_path)
    assert [event["node"] for event in events] == ['broker "eu" 1'] * 2
    assert set(events[0]) == set(FIELD_NAMES)
    assert events[0]["message_id"] == "m-1" and events[0]["body_included"] is True


def test_the_node_defaults_to_the_host_name(tmp_path):
    log = DeadLetterLog(tmp_path)
    _die(log, b"poison")
    log.close()
    assert _events(tmp_path)[0]["node"] == socket.gethostname()


def test_node_name_is_a_config_key_defaulting_to_the_host_name(tmp_path):
    assert BrokerConfig().node_name == socket.gethostname()
    path = tmp_path / "broker.toml"
    path.write_text('node_name = "broker-eu-1"\n')
    assert BrokerConfig.load(path).node_name == "broker-eu-1"
