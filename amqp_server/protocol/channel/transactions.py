"""The channel's transactions part: tx.select, commit and rollback.
Publishes are checked and routed when they arrive and queued at commit
(broker/publishing.py: check_and_route, enqueue_routed); a commit applies
its actions in order and never loses one."""

from __future__ import annotations

from pamqp import commands as spec

from ...errors import precondition_failed
from ...wire import frames
from ...wire.methods import make


class TransactionsPart:
    def _tx_select(self, method) -> None:
        if self.confirm:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = []
        self.send(make(spec.Tx.SelectOk))

    def _tx_commit(self, method) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        actions = self.tx
        generation = 0  # the store flush that makes the persistent ones durable
        done = 0
        try:
            for action in actions:
                if action[0] == "publish":
                    _, routed, mandatory = action
                    outcome = self.vhost.enqueue_routed(routed, mandatory)
                    self._answer(routed.message, outcome, mandatory)
                    generation = max(generation, routed.message.stored_gen or 0)
                elif action[0] == "ack":
                    self._settle(action[1])
                elif action[2]:
                    self._requeue(action[1])
                else:
                    self._discard(action[1])
                done += 1
        finally:
            # Should anything fail part-way, the acks and rejects not yet
            # applied stay in the transaction, and closing the channel puts
            # their messages back in their queues: none is lost.
            del actions[:done]
        commit_ok = frames.method_frame(self.number, make(spec.Tx.CommitOk))
        if generation:
            definitions = self._journal.pending()
            if self._held or not self._on_disk(generation, definitions):
                # As RabbitMQ: commit-ok once the persistent messages (and
                # their queues' declarations) are on disk.
                self._held.append((generation, definitions, commit_ok))
                self._wait_for_disk(generation, definitions)
                return
        self.conn.write(commit_ok)

    def _tx_rollback(self, method) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        actions, self.tx = self.tx, []
        # Acks and rejects made inside the transaction are undone: those
        # deliveries are outstanding again (RabbitMQ).
        restored = [pair for action in actions if action[0] != "publish"
                    for pair in action[1]]
        if restored:
            merged = dict(self.unacked)
            merged.update(restored)
            self.unacked = dict(sorted(merged.items()))
        self.send(make(spec.Tx.RollbackOk))
