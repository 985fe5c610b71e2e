"""The channel's confirms part: what a publisher hears of its publishes
(returns, publisher confirms), and replies held until what they promise is
on disk (confirms, tx.commit-ok, deliveries counted before they go out)."""

from __future__ import annotations

from pamqp import commands as spec

from ...broker.message import Message
from ...errors import precondition_failed
from ...wire import frames
from ...wire.methods import make


class ConfirmsPart:
    def flush_confirms(self) -> None:
        """Confirm every publish handled so far whose persistent copies are
        on disk: one basic.ack for each run of accepted publishes, a
        basic.nack for each refused one."""
        self._confirm_pending = False
        if self.closing:
            return
        upto = self.publish_seq
        waits = self._durable_waits
        if waits:
            while waits and self._on_disk(waits[0][1], waits[0][2]):
                waits.popleft()
            if waits:
                upto = waits[0][0] - 1
                self._wait_for_disk(waits[0][1], waits[0][2])
        if upto <= self.confirmed_upto:
            return
        nacks = self._nacks
        while nacks and nacks[0] <= upto:
            seq = nacks.pop(0)
            if seq - 1 > self.confirmed_upto:
                self._write_ack(seq - 1)
            self.conn.write(frames.nack_frame(self.number, seq, False))
            self.confirmed_upto = seq
        if upto > self.confirmed_upto:
            self._write_ack(upto)

    def _on_disk(self, generation: int, definitions: int) -> bool:
        return (generation <= self.conn.broker.store.synced
                and definitions <= self._journal.synced)

    def _wait_for_disk(self, generation: int, definitions: int) -> None:
        if generation > self.conn.broker.store.synced:
            self.conn.broker.store.wait(self)
        if definitions > self._journal.synced:
            self._journal.wait(self)

    def durable_progress(self) -> None:
        """The store flushed: confirms and deliveries waiting for it may go out."""
        if self._held:
            self._release_held()
        if not self._confirm_pending and not self.closing:
            self._confirm_pending = True
            self.conn.confirms_due(self)

    def _write_ack(self, upto: int) -> None:
        multiple = upto - self.confirmed_upto > 1
        self.confirmed_upto = upto
        self.conn.write(frames.ack_frame(self.number, upto, multiple))

    def _answer(self, message: Message, outcome, mandatory: bool) -> None:
        """What the publisher hears of one publish (an outcome of the publish
        path, broker/publishing.py): basic.return when it was mandatory and
        no queue was routed to; then, in confirm mode, its confirm: a nack
        when a queue refused it, else an ack once it is on disk."""
        if mandatory and not outcome.routed:
            self._return_unroutable(message)
        if not self.confirm:
            return
        self.publish_seq += 1
        if outcome.refused:
            self._nacks.append(self.publish_seq)
        elif message.stored_gen is not None:
            self._durable_waits.append((self.publish_seq, message.stored_gen,
                                        self._journal.pending()))
        if not self._confirm_pending:
            self._confirm_pending = True
            self.conn.confirms_due(self)

    def _release_held(self) -> None:
        held = self._held
        if self.closing:
            held.clear()  # the channel's unacked messages were requeued
            return
        while held and self._on_disk(held[0][0], held[0][1]):
            self.conn.write(held.popleft()[2])
        if held:
            self._wait_for_disk(held[0][0], held[0][1])

    def _confirm_select(self, method) -> None:
        if self.tx is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        self.confirm = True
        if not method.nowait:
            self.send(make(spec.Confirm.SelectOk))
