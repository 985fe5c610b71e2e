"""Content frames out of their place, each as a client could send it on
channel 1 (the close-naming differentials send them on an open channel and
on one the broker has closed), and the connection.close each gets."""

from __future__ import annotations

from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .rawclient import RawClient


def _header(size: int, class_id: int = 60) -> bytes:
    header = frames.content_header(size, b"\x00\x00")
    return frames.frame(frames.FRAME_HEADER, 1, class_id.to_bytes(2, "big") + header[2:])


def _publish() -> bytes:
    return frames.method_frame(1, make(spec.Basic.Publish, exchange="", routing_key="k"))


BROKEN_CONTENT = {
    "a header of another class": _publish() + _header(1, 50),
    "a second header": _publish() + _header(2) + _header(2),
    "a body before the header": _publish() + frames.frame(frames.FRAME_BODY, 1, b"x"),
    "a publish before the body": _publish() + _header(2) + _publish(),
    "a method before the header": _publish() + frames.method_frame(
        1, make(spec.Queue.Declare, queue="pcd.x")),
    "a method before the body": _publish() + _header(2) + frames.method_frame(
        1, make(spec.Queue.Declare, queue="pcd.x")),
    "a channel.close amid the content": _publish() + frames.method_frame(
        1, make(spec.Channel.Close, reply_code=200, reply_text="")),
    "a body with no publish": frames.frame(frames.FRAME_BODY, 1, b"x"),
    "a header with no publish": _header(1),
}


def broken_content(url: str, cases: dict = BROKEN_CONTENT, first=None) -> dict:
    """The connection.close each broken content stream gets, on its own
    connection (channel 1 open), after `first(client)` when given."""
    seen = {}
    for name, data in cases.items():
        client = RawClient.for_url(url)
        try:
            if first is not None:
                first(client)
            client.send(data)
            channel, close = client.read_method()
        finally:
            client.close()
        assert (channel, type(close)) == (0, spec.Connection.Close), close
        seen[name] = (close.reply_code, close.reply_text, close.class_id, close.method_id)
    return seen
