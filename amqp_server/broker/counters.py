"""Broker-wide totals since start that only grow: what RabbitMQ's Prometheus
plugin reports as `rabbitmq_global_messages_*` and the churn counters
(`rabbitmq_connections_opened_total`, ...).

Channels, connections and virtual hosts add to one `Counters` per broker
where the event happens.  Dead-lettering is already counted per queue
(`queue.stats`); those counts are summed at scrape time, and a deleted
queue's counts are kept here (`retire`) so that the totals never go down.
"""

from __future__ import annotations

from collections import Counter

from dlx.dead_letter import NO_DLX


class Counters:
    def __init__(self) -> None:
        self.connections_opened = 0
        self.channels_opened = 0
        self.queues_declared = 0
        self.queues_created = 0
        self.queues_deleted = 0
        # Publishes, as the one publish path (publishing.py) counts them: a
        # channel's, the management API's and the workbench's; dead letters
        # are counted by their queues instead, as RabbitMQ does.
        self.received = 0
        self.received_confirm = 0
        self.routed = 0
        self.unroutable_returned = 0
        self.unroutable_dropped = 0
        self.confirmed = 0
        # Deliveries and acknowledgements by queue type ("classic", "quorum").
        self.consumed_auto_ack: Counter = Counter()
        self.consumed_manual_ack: Counter = Counter()
        self.got_auto_ack: Counter = Counter()
        self.got_manual_ack: Counter = Counter()
        self.get_empty: Counter = Counter()
        self.redelivered: Counter = Counter()
        self.acknowledged: Counter = Counter()
        # Deleted queues' deaths: (queue type, strategy, reason) and
        # (cause, reason) -> count.
        self.retired_dead_lettered: Counter = Counter()
        # and as the queues count them: republished by reason, dropped by
        # (cause, reason).
        self.retired_republished: Counter = Counter()
        self.retired_dropped: Counter = Counter()
        self.retired_expired = 0
        self.retired_received: Counter = Counter()  # dead letters that arrived, by reason
        self.retired_archived = 0

    def publishes(self, count: int, routed: bool, mandatory: bool, confirm: bool,
                  refused=()) -> None:
        """`count` publishes that fared alike.  In confirm mode, one is
        confirmed unless a queue refused it (`refused`: those queues)."""
        self.received += count
        if confirm:
            self.received_confirm += count
            if not refused:
                self.confirmed += count
        if routed:
            self.routed += count
        elif mandatory:
            self.unroutable_returned += count
        else:
            self.unroutable_dropped += count

    def routed_later(self, routed: bool) -> None:
        """A delayed message routed when due: counted as routed or dropped
        (as the plugin bumps messages_routed), never as received again."""
        if routed:
            self.routed += 1
        else:
            self.unroutable_dropped += 1

    def delivered(self, queue, count: int, no_ack: bool, redelivered: int) -> None:
        kind = queue.settings.queue_type
        (self.consumed_auto_ack if no_ack else self.consumed_manual_ack)[kind] += count
        if redelivered:
            self.redelivered[kind] += redelivered

    def got(self, queue, no_ack: bool, redelivered: bool) -> None:
        kind = queue.settings.queue_type
        (self.got_auto_ack if no_ack else self.got_manual_ack)[kind] += 1
        if redelivered:
            self.redelivered[kind] += 1

    def retire(self, queue) -> None:
        """A queue is deleted: keep its deaths in the totals."""
        self.queues_deleted += 1
        for key, count in dead_letter_deaths(queue).items():
            self.retired_dead_lettered[key] += count
        self.retired_republished.update(queue.stats["dead_lettered"])
        self.retired_dropped.update(queue.stats["dropped"])
        self.retired_expired += queue.stats["expired"]
        self.retired_received.update(queue.stats["dead_letters_received"])
        self.retired_archived += queue.stats["archived"]


def dead_letter_strategy(queue) -> str:
    """RabbitMQ's label for how a queue's dead letters go: a quorum queue's
    at-least-once strategy, else at-most-once."""
    return queue.settings.dead_letter_strategy.replace("-", "_")


def dead_letter_deaths(queue) -> Counter:
    """(queue type, dead_letter_strategy, reason) -> deaths of this queue, as
    RabbitMQ's rabbitmq_global_messages_dead_lettered_*_total count them:
    a message that died without a dead-letter exchange counts under
    "disabled"; one whose dead-lettering failed later on (missing
    exchange, no route, cycle, full target) under the queue's strategy."""
    kind = f"rabbit_{queue.settings.queue_type}_queue"
    strategy = dead_letter_strategy(queue)
    deaths: Counter = Counter()
    for reason, count in queue.stats["dead_lettered"].items():
        deaths[(kind, strategy, reason)] += count
    for (cause, reason), count in queue.stats["dropped"].items():
        deaths[(kind, "disabled" if cause == NO_DLX else strategy, reason)] += count
    return deaths
