"""A connection's flow control (protocol/flow.py) on its own: plain objects
stand for the broker's resources and the transport; no socket, no loop."""

from __future__ import annotations

from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.protocol.flow import (
    ALARM,
    LOGIN_REFUSED,
    OUTPUT_HIGH_WATER,
    PEER_NOT_READING,
    STORE_BUSY,
    Flow,
)
from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .sansio import Resources, Transport, methods, open_connection


def flow(resources: Resources | None = None) -> tuple[Flow, Transport, list]:
    told: list = []
    control = Flow(resources or Resources(), told.append)
    transport = Transport()
    control.attach(transport)
    return control, transport, told


def test_a_fresh_connection_is_read_and_has_the_whole_room():
    control, transport, told = flow()
    assert control.reading and control.reasons() == set()
    assert control.can_deliver(1) and control.room() == OUTPUT_HIGH_WATER
    assert transport.calls == [] and told == []


def test_an_alarm_blocks_a_publisher_and_stops_reading_it():
    resources = Resources()
    control, transport, told = flow(resources)
    control.publishing = True
    resources.alarms.add("memory")
    control.resources_changed()
    assert told == ["low on memory"]
    assert transport.calls == ["pause"] and not control.reading
    assert control.reasons() == {ALARM}


def test_the_block_names_every_alarm_in_force():
    control, _, told = flow(Resources(alarms={"memory", "disk"}))
    control.publishing = True
    control.after_read()
    assert told == ["low on disk and memory"]


def test_an_alarm_leaves_a_connection_that_never_published_alone():
    resources = Resources()
    control, transport, told = flow(resources)
    resources.alarms.add("disk")
    control.resources_changed()
    assert told == [] and transport.calls == [] and control.reading


def test_a_connection_that_starts_publishing_during_an_alarm_is_blocked_after_the_read():
    control, transport, told = flow(Resources(alarms={"disk"}))
    control.publishing = True  # set by the connection while it reads
    assert told == []
    control.after_read()
    assert told == ["low on disk"] and transport.calls == ["pause"]


def test_the_alarm_cleared_unblocks_and_reading_resumes():
    resources = Resources(alarms={"memory"})
    control, transport, told = flow(resources)
    control.publishing = True
    control.after_read()
    resources.alarms.clear()
    control.resources_changed()
    assert told == ["low on memory", None]
    assert transport.calls == ["pause", "resume"] and control.reading


def test_a_busy_store_stops_reading_a_publisher_without_telling_it():
    resources = Resources(store_busy=True)
    control, transport, told = flow(resources)
    control.publishing = True
    control.after_read()
    assert told == [] and transport.calls == ["pause"]
    assert control.reasons() == {STORE_BUSY}
    resources.store_busy = False
    control.resources_changed()
    assert transport.calls == ["pause", "resume"]


def test_a_busy_store_does_not_stop_a_consumer_only_connection():
    control, transport, _ = flow(Resources(store_busy=True))
    control.after_read()
    control.resources_changed()
    assert transport.calls == [] and control.reading


def test_a_peer_that_does_not_read_is_not_read_and_gets_no_deliveries():
    control, transport, _ = flow()
    control.pause_writing()
    assert transport.calls == ["pause"] and control.reasons() == {PEER_NOT_READING}
    assert not control.can_deliver(1)
    control.resume_writing()
    assert transport.calls == ["pause", "resume"] and control.can_deliver(1)


def test_reading_resumes_only_when_every_reason_is_gone():
    resources = Resources(store_busy=True)
    control, transport, _ = flow(resources)
    control.publishing = True
    control.after_read()
    control.pause_writing()
    control.resume_writing()  # the store is still busy
    assert transport.calls == ["pause"]
    resources.store_busy = False
    control.resources_changed()
    assert transport.calls == ["pause", "resume"]


def test_a_refused_login_stops_reading_for_good():
    control, transport, _ = flow()
    control.refuse_login()
    control.resources_changed()
    control.resume_writing()
    assert transport.calls == ["pause"] and control.reasons() == {LOGIN_REFUSED}


def test_without_a_transport_nothing_is_paused_but_the_block_is_still_told():
    told: list = []
    control = Flow(Resources(alarms={"memory"}), told.append)
    control.publishing = True
    control.after_read()
    assert told == ["low on memory"] and control.reading


def test_output_past_the_high_water_mark_holds_deliveries_until_drained():
    control, _, _ = flow()
    control.buffered = OUTPUT_HIGH_WATER - 10
    assert control.can_deliver(1) and control.room() == 10
    assert not control.drained()  # nobody waited
    control.buffered = OUTPUT_HIGH_WATER
    assert not control.can_deliver(1)
    control.buffered = 0
    assert control.drained()  # the waiting deliveries may go on, once
    assert not control.drained()


def test_a_drained_buffer_does_not_release_deliveries_while_the_peer_does_not_read():
    control, _, _ = flow()
    control.pause_writing()
    assert not control.can_deliver(1)
    assert not control.drained()
    control.resume_writing()
    assert control.drained()


def test_a_channel_paused_by_channel_flow_gets_no_deliveries_until_resumed():
    control, _, _ = flow()
    control.channel_flow(2, active=False)
    assert not control.can_deliver(2) and control.can_deliver(1)
    assert not control.drained()  # a paused channel is not a full buffer
    control.channel_flow(2, active=True)
    assert control.can_deliver(2)



# ---- through a connection ----------------------------------------------


def _deliveries_after(conn, *sent: tuple[int, object]) -> list:
    for number, method in sent:
        conn.receive_data(frames.method_frame(number, method))
    return [m for m in methods(conn.data_to_send()) if isinstance(m, spec.Basic.Deliver)]


def test_channel_flow_pauses_one_channels_deliveries_and_a_reused_number_starts_active():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    consume = make(spec.Basic.Consume, queue="q", consumer_tag="c", no_ack=True)
    assert _deliveries_after(conn, (1, make(spec.Queue.Declare, queue="q")),
                             (1, make(spec.Channel.Flow, active=False)), (1, consume)) == []
    publisher = open_connection(broker)
    publisher.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                           + frames.frame(2, 1, frames.content_header(0, b"\x00\x00")))
    assert _deliveries_after(conn) == []
    assert len(_deliveries_after(conn, (1, make(spec.Channel.Flow, active=True)))) == 1
    _deliveries_after(conn, (2, make(spec.Channel.Open)),
                      (2, make(spec.Channel.Flow, active=False)),
                      (2, make(spec.Channel.Close, reply_code=200)),
                      (2, make(spec.Channel.Open)))
    assert conn.flow.can_deliver(2)
