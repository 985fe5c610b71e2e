"""What a publisher hears of its publishes: basic.return for a mandatory
message no queue took, and in confirm mode its publisher confirm (a nack
when a queue refused it, else an ack once its persistent copies, and the
declarations they depend on, are on disk).

Owns: confirm mode (`on`), the publish sequence, how far it is confirmed,
the nacks due and the confirms waiting for disk.
Needs: the connection (`write`, `frame_max`, `confirms_due` to have
`flush` called before the next write to the peer), the channel's output
(`on_disk`, `wait_for_disk`, `pending_definitions`) and the channel, which
the connection calls back.

Interface: `select`, `answer`, `answer_run`, `flush`, `durable_progress`, `close`.
"""

from __future__ import annotations

from collections import deque

from pamqp import commands as spec

from ...broker.message import Message
from ...errors import NO_ROUTE, precondition_failed
from ...wire import frames
from ...wire.methods import make
from .output import ChannelOutput


class Confirms:
    __slots__ = ("number", "on", "publish_seq", "confirmed_upto", "_conn", "_output",
                 "_channel", "_pending", "_nacks", "_durable_waits", "_closed")

    def __init__(self, number: int, connection, output: ChannelOutput, channel) -> None:
        self.number = number
        self.on = False
        self.publish_seq = 0
        self.confirmed_upto = 0
        self._conn = connection
        self._output = output
        self._channel = channel
        self._pending = False  # a flush is due (connection.confirms_due)
        self._nacks: list[int] = []  # publish seqs a full queue refused
        # (publish seq, store generation, definition log generation):
        # confirms that wait for an fsync of the message and of the
        # definitions (its queue's declaration) changed before it.
        self._durable_waits: deque[tuple[int, int, int]] = deque()
        self._closed = False

    def select(self, nowait: bool, transactional: bool) -> None:
        """confirm.select."""
        if transactional:
            raise precondition_failed("cannot switch from tx to confirm mode")
        self.on = True
        if not nowait:
            self._output.send(make(spec.Confirm.SelectOk))

    def answer(self, message: Message, outcome, mandatory: bool) -> None:
        """What the publisher hears of one publish (an outcome of the publish
        path, broker/publishing.py): basic.return when it was mandatory and
        no queue was routed to; then, in confirm mode, its confirm."""
        if mandatory and not outcome.routed:
            self._conn.write(frames.basic_return(
                self.number, NO_ROUTE, "NO_ROUTE", message.route, message.header,
                message.body, self._conn.frame_max))
        if not self.on:
            return
        self.publish_seq += 1
        if outcome.refused:
            self._nacks.append(self.publish_seq)
        elif message.stored_gen is not None:
            self._durable_waits.append((self.publish_seq, message.stored_gen,
                                        self._output.pending_definitions()))
        if not self._pending:
            self._pending = True
            self._conn.confirms_due(self._channel)

    def answer_run(self, messages: list, outcome, mandatory: bool) -> None:
        """`answer` for a run of publishes that met one outcome together
        (broker/publishing.py's plain queues): in confirm mode one wait for
        the whole run, on the latest store flush any of them needs, instead
        of one per publish.  None of the run is confirmed before all of it
        is on disk; they were stored together, so that costs no time."""
        if not self.on or outcome.refused or (mandatory and not outcome.routed):
            for message in messages:
                self.answer(message, outcome, mandatory)
            return
        first = self.publish_seq + 1
        self.publish_seq += len(messages)
        generations = [message.stored_gen for message in messages
                       if message.stored_gen is not None]
        if generations:
            self._durable_waits.append((first, max(generations),
                                        self._output.pending_definitions()))
        if not self._pending:
            self._pending = True
            self._conn.confirms_due(self._channel)

    def flush(self) -> None:
        """Confirm every publish handled so far whose persistent copies are
        on disk: one basic.ack for each run of accepted publishes, a
        basic.nack for each refused one."""
        self._pending = False
        if self._closed:
            return
        upto = self.publish_seq
        waits = self._durable_waits
        if waits:
            output = self._output
            while waits and output.on_disk(waits[0][1], waits[0][2]):
                waits.popleft()
            if waits:
                upto = waits[0][0] - 1
                output.wait_for_disk(waits[0][1], waits[0][2])
        if upto <= self.confirmed_upto:
            return
        nacks = self._nacks
        while nacks and nacks[0] <= upto:
            seq = nacks.pop(0)
            if seq - 1 > self.confirmed_upto:
                self._write_ack(seq - 1)
            self._conn.write(frames.nack_frame(self.number, seq, False))
            self.confirmed_upto = seq
        if upto > self.confirmed_upto:
            self._write_ack(upto)

    def durable_progress(self) -> None:
        """The stores synced: confirms waiting for them may go out."""
        if not self._pending and not self._closed:
            self._pending = True
            self._conn.confirms_due(self._channel)

    def close(self) -> None:
        self._closed = True

    def _write_ack(self, upto: int) -> None:
        multiple = upto - self.confirmed_upto > 1
        self.confirmed_upto = upto
        self._conn.write(frames.ack_frame(self.number, upto, multiple))
