"""Durable definitions as a log of changes: what a restart restores (wire
types included), compaction that keeps the log small while changes go on,
damaged records, the JSON file of earlier versions, and confirms that wait
for the definitions their message relies on."""

from __future__ import annotations

import asyncio
import json

import pytest
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.broker.permissions import Permission
from amqp_server.config import BrokerConfig
from amqp_server.storage import definition_log
from amqp_server.storage.definition_log import DefinitionLog
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties
from amqp_server.wire.table import FieldTable, typed_value

from .disk_brokers import open_broker
from .sansio import call, methods, open_connection, publish


def log_path(tmp_path):
    return tmp_path / "definitions" / "log"


def test_arguments_keep_their_wire_types_across_a_restart(tmp_path):
    broker, _ = open_broker(tmp_path)
    arguments = FieldTable({"x-message-ttl": 5000, "x-max-length": 10})
    arguments.types.update({"x-message-ttl": "long", "x-max-length": "short"})
    broker.vhosts["/"].declare_queue("typed", None, durable=True, arguments=arguments)
    again, problems = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["typed"].arguments
    assert problems == []
    assert typed_value(restored, "x-message-ttl") == ("long", 5000)
    assert typed_value(restored, "x-max-length") == ("short", 10)


def test_a_restart_restores_exactly_what_the_log_says(tmp_path):
    """Deleted defaults stay deleted; what was removed is not restored."""
    broker, _ = open_broker(tmp_path)
    broker.add_vhost("prod")
    vhost = broker.vhosts["prod"]
    vhost.declare_exchange("orders", "topic", durable=True)
    for name in ("kept", "gone", "auto"):
        vhost.declare_queue(name, None, durable=True, auto_delete=name == "auto")
    vhost.declare_queue("transient", None, durable=False)
    vhost.bind("orders", vhost.queues["kept"], "a.#", None)
    vhost.bind("orders", vhost.queues["gone"], "b.#", None)
    vhost.bind("orders", vhost.queues["kept"], "c.#", None)
    vhost.unbind("orders", vhost.queues["kept"], "c.#", None)
    vhost.delete_queue(vhost.queues["gone"])
    broker.delete_user("guest")
    again, problems = open_broker(tmp_path)
    assert problems == []
    assert "guest" not in again.users
    restored = again.vhosts["prod"]
    assert set(restored.queues) == {"kept"}
    assert [(b.routing_key, b.destination.name)
            for b in restored.exchanges["orders"].bindings.values()] == [("a.#", "kept")]


def test_deleting_a_vhost_removes_everything_recorded_in_it(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.add_vhost("tmp")
    broker.set_permission("guest", "tmp", Permission())
    broker.vhosts["tmp"].declare_queue("q", None, durable=True)
    broker.delete_vhost("tmp")
    broker.add_vhost("tmp")  # made again: nothing of the old one comes back
    again, _ = open_broker(tmp_path)
    assert again.vhosts["tmp"].queues == {}
    assert ("guest", "tmp") not in again.permissions


def test_compaction_keeps_the_log_small_and_the_state_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(definition_log, "COMPACT_SLACK", 20_000)
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    for n in range(50):
        vhost.declare_queue(f"keep-{n}", None, durable=True)
    for n in range(3000):  # churn: each pair is two more records
        queue = vhost.declare_queue(f"churn-{n}", None, durable=True)
        vhost.delete_queue(queue)
    assert log_path(tmp_path).stat().st_size < 3 * 20_000
    again, problems = open_broker(tmp_path)
    assert problems == []
    assert set(again.vhosts["/"].queues) == {f"keep-{n}" for n in range(50)}


def test_changes_made_while_a_compaction_runs_are_kept(tmp_path, monkeypatch):
    """With a loop, compaction writes on a worker thread while changes go
    on; those changes end up in the new file too."""
    monkeypatch.setattr(definition_log, "COMPACT_SLACK", 5_000)
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    journal = broker.journal

    async def churn() -> None:
        journal.attach(asyncio.get_running_loop())
        for n in range(2000):
            queue = vhost.declare_queue(f"churn-{n}", None, durable=True)
            vhost.delete_queue(queue)
            if n % 7 == 0:
                vhost.declare_queue(f"keep-{n}", None, durable=True)
            if n % 100 == 0:
                await asyncio.sleep(0)
        await journal.shutdown()

    asyncio.run(churn())
    broker.close_data_dir()
    assert log_path(tmp_path).stat().st_size < 3 * 5_000 + 2000 * 40
    again = Broker(BrokerConfig(data_dir=str(tmp_path)))
    again.open_data_dir()
    assert set(again.vhosts["/"].queues) == {f"keep-{n}" for n in range(0, 2000, 7)}
    again.close_data_dir()


def test_a_damaged_record_costs_that_definition_only(tmp_path):
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    for name in ("a", "b", "c"):
        vhost.declare_queue(name, None, durable=True)
    data = bytearray(log_path(tmp_path).read_bytes())
    data[data.index(b"\xa1b") + 1] ^= 0xFF  # inside queue b's record
    log_path(tmp_path).write_bytes(bytes(data) + b"\xa5\x5a\x00")  # and a torn tail
    again, problems = open_broker(tmp_path)
    assert set(again.vhosts["/"].queues) == {"a", "c"}
    assert any("corrupt record" in p for p in problems)
    assert any("torn" in p for p in problems)


def test_the_json_file_of_earlier_versions_is_taken_over(tmp_path):
    legacy = {"vhosts": [{"name": "/"}, {"name": "old"}],
              "users": [{"name": "guest", "password_hash": Broker().users["guest"].password_hash,
                         "tags": ["administrator"]}],
              "permissions": [{"user": "guest", "vhost": "old", "configure": ".*",
                               "write": ".*", "read": ".*"}],
              "queues": [{"name": "q", "vhost": "old", "durable": True, "auto_delete": False,
                          "arguments": {"x-max-length": 5}}],
              "exchanges": [], "bindings": []}
    (tmp_path / "definitions.json").write_text(json.dumps(legacy))
    broker, problems = open_broker(tmp_path)
    assert problems == [] and broker.vhosts["old"].queues["q"].settings.max_length == 5
    assert not (tmp_path / "definitions.json").exists()
    again, _ = open_broker(tmp_path)
    assert "q" in again.vhosts["old"].queues and ("guest", "old") in again.permissions


def test_a_confirm_waits_for_the_declaration_of_its_queue(tmp_path):
    """A persistent message confirmed before its queue's record is on disk
    could be dropped as a missing queue's after a power cut."""
    broker, _ = open_broker(tmp_path)
    journal = broker.journal
    conn = open_connection(broker)
    call(conn, 1, make(spec.Confirm.Select))
    call(conn, 1, make(spec.Queue.Declare, queue="d", durable=True))
    journal.local_synced -= 1  # as if the fsync of that record had not finished
    conn.receive_data(publish("d", b"m", Properties(delivery_mode=2)))
    broker.store.flush_now()
    assert [type(m) for m in methods(conn.data_to_send())] == []
    journal._synced(journal.written)
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Basic.Ack]


def test_removing_what_was_never_stored_writes_nothing(tmp_path):
    journal = DefinitionLog(tmp_path)
    journal.recover()
    journal.user_deleted("nobody")
    assert journal.written == 0 and log_path(tmp_path).stat().st_size == 0
    journal.close()


@pytest.mark.parametrize("kind", ["X", "Q", "B", "P", "V", "U"])
def test_a_removal_record_is_its_key(kind):
    records = {"X": ["X", "/", "x", "topic", False, False, b"\x00\x00\x00\x00"],
               "Q": ["Q", "/", "q", False, b"\x00\x00\x00\x00"],
               "B": ["B", "/", "x", "q", "q", "k", b"\x00\x00\x00\x00"],
               "P": ["P", "u", "/", ".*", ".*", ".*"], "V": ["V", "/"], "U": ["U", "u", "h", []]}
    key = definition_log.record_key(records[kind])
    assert definition_log.record_key([key[0] + "-", *key[1:]]) == key
