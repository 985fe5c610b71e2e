"""Reads used a share per turn of the event loop (read_shares.py), with
a stand-in transport and loop: the socket waits while a read's rest is
held, and the connection's flow pauses and resumes through it."""

from __future__ import annotations

from amqp_server.read_shares import READ_SHARE, ReadShares


class Socket:
    def __init__(self) -> None:
        self.calls: list = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing


class Loop:
    def __init__(self) -> None:
        self.ready: list = []

    def call_soon(self, callback) -> None:
        self.ready.append(callback)

    def turn(self) -> None:
        ready, self.ready = self.ready, []
        for callback in ready:
            callback()


def shares() -> tuple[ReadShares, Socket, Loop, list]:
    used: list = []
    socket, loop = Socket(), Loop()
    return ReadShares(socket, loop.call_soon, used.append), socket, loop, used


def test_a_small_read_is_used_at_once():
    reading, socket, loop, used = shares()
    reading.received(b"x" * 100)
    assert used == [b"x" * 100] and socket.calls == [] and loop.ready == []


def test_a_full_read_keeps_the_socket_waiting_for_the_next_turn():
    reading, socket, loop, used = shares()
    reading.received(b"z" * READ_SHARE)
    assert used == [b"z" * READ_SHARE] and socket.calls == ["pause"]
    loop.turn()
    assert socket.calls == ["pause", "resume"] and len(used) == 1


def test_a_large_read_is_used_a_share_per_turn_and_the_socket_waits():
    reading, socket, loop, used = shares()
    data = bytes(range(256)) * (3 * READ_SHARE // 256 + 1)
    reading.received(data)
    assert used == [data[:READ_SHARE]] and socket.calls == ["pause"]
    loop.turn()
    assert used[1] == data[READ_SHARE:2 * READ_SHARE] and socket.calls == ["pause"]
    loop.turn()
    loop.turn()
    assert b"".join(used) == data and len(used) == 4
    assert socket.calls == ["pause", "resume"]


def test_what_is_held_waits_while_the_flow_stops_reading_and_goes_first_after():
    reading, socket, loop, used = shares()
    data = b"y" * (READ_SHARE + 1000)
    reading.received(data)
    reading.pause_reading()  # credit withheld during the first share
    loop.turn()
    assert len(used) == 1 and socket.calls == ["pause"]
    reading.resume_reading()
    assert socket.calls == ["pause"]  # the held share before the socket
    loop.turn()
    assert b"".join(used) == data and socket.calls == ["pause", "resume"]


def test_the_flow_pausing_and_resuming_reaches_the_socket_when_nothing_is_held():
    reading, socket, _, _ = shares()
    reading.pause_reading()
    reading.resume_reading()
    assert socket.calls == ["pause", "resume"]
