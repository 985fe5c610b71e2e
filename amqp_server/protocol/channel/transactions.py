"""A channel's transactions: tx.select, commit and rollback.

Publishes are checked and routed when they arrive and queued at commit
(broker/publishing.py: check_and_route, enqueue_routed); acks and rejects
wait for the commit too.  A commit applies its actions in order and never
loses one.

Owns: whether the channel is transactional (`actions` is None when not)
and the actions waiting for commit, in order: ("publish", routed,
mandatory), ("ack", taken) and ("reject", taken, requeue, how).
Needs: the virtual host (routing, queueing), the channel's confirms (what
the publisher hears at commit), deliveries (settle, requeue, discard,
restore) and output (replies; commit-ok held until the persistent
messages are on disk).

Interface: `select`, `publish`, `ack`, `reject`, `commit`, `rollback`,
`abandon`, `count`.
"""

from __future__ import annotations

from pamqp import commands as spec

from dlx.redelivery import REJECTED

from ...broker.message import Message
from ...errors import precondition_failed
from ...wire import frames
from ...wire.methods import make
from .confirms import Confirms
from .deliveries import Deliveries, Taken
from .output import ChannelOutput


class Transactions:
    __slots__ = ("number", "actions", "_vhost", "_confirms", "_deliveries", "_output")

    def __init__(self, number: int, vhost, confirms: Confirms, deliveries: Deliveries,
                 output: ChannelOutput) -> None:
        self.number = number
        self.actions: list | None = None
        self._vhost = vhost
        self._confirms = confirms
        self._deliveries = deliveries
        self._output = output

    def select(self) -> None:
        if self._confirms.on:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.actions is None:
            self.actions = []
        self._output.send(make(spec.Tx.SelectOk))

    def publish(self, message: Message, mandatory: bool, grant, reply_name: str | None) -> None:
        """Checked and routed when it arrives, queued at commit."""
        routed = self._vhost.check_and_route(message, grant, reply_name)
        self._pending().append(("publish", routed, mandatory))

    def ack(self, taken: Taken) -> None:
        self._pending().append(("ack", taken))

    def reject(self, taken: Taken, requeue: bool, how: str = REJECTED) -> None:
        self._pending().append(("reject", taken, requeue, how))

    def count(self, kind: str) -> int:
        """Actions of a kind ("publish", "ack", "reject") waiting for commit."""
        return sum(1 for action in self.actions or () if action[0] == kind)

    def commit(self) -> None:
        if self.actions is None:
            raise precondition_failed("channel is not transactional")
        actions = self.actions
        deliveries = self._deliveries
        generation = 0  # the store flush that makes the persistent ones durable
        done = 0
        try:
            for action in actions:
                if action[0] == "publish":
                    _, routed, mandatory = action
                    outcome = self._vhost.enqueue_routed(routed, mandatory)
                    self._confirms.answer(routed.message, outcome, mandatory)
                    generation = max(generation, routed.message.stored_gen or 0)
                elif action[0] == "ack":
                    deliveries.settle(action[1])
                elif action[2]:
                    deliveries.requeue(action[1], action[3])
                else:
                    deliveries.discard(action[1], action[3])
                done += 1
        finally:
            # Should anything fail part-way, the acks and rejects not yet
            # applied stay in the transaction, and closing the channel puts
            # their messages back in their queues: none is lost.
            del actions[:done]
        commit_ok = frames.method_frame(self.number, make(spec.Tx.CommitOk))
        if generation:
            # As RabbitMQ: commit-ok once the persistent messages (and
            # their queues' declarations) are on disk.
            output = self._output
            output.write_when_on_disk(generation, output.pending_definitions(), commit_ok)
        else:
            self._output.write(commit_ok)

    def rollback(self) -> None:
        if self.actions is None:
            raise precondition_failed("channel is not transactional")
        actions, self.actions = self.actions, []
        # Acks and rejects made inside the transaction are undone: those
        # deliveries are outstanding again (RabbitMQ).
        restored = [pair for action in actions if action[0] != "publish"
                    for pair in action[1]]
        if restored:
            self._deliveries.restore(restored)
        self._output.send(make(spec.Tx.RollbackOk))

    def abandon(self) -> Taken:
        """The channel closes: the deliveries acked or rejected inside the
        open transaction, never applied (they go back to their queues)."""
        if not self.actions:
            return []
        taken = [pair for action in self.actions if action[0] != "publish"
                 for pair in action[1]]
        self.actions = None
        return taken

    def _pending(self) -> list:
        assert self.actions is not None, "not in a transaction"
        return self.actions
