"""The queue a channel's methods name: "" means the queue the channel
declared last (AMQP 0-9-1, queue.declare: "the server ... uses the last
declared queue name").

Owns: the name of the last queue declared on the channel.
Needs: the virtual host and the connection (exclusive queues are its own).

Interface: `declared`, `resolve`, `owned_queue`.
"""

from __future__ import annotations

from ...errors import not_found


class QueueNames:
    __slots__ = ("last", "_vhost", "_conn")

    def __init__(self, vhost, connection) -> None:
        self.last = ""
        self._vhost = vhost
        self._conn = connection

    def declared(self, name: str) -> None:
        self.last = name

    def resolve(self, name: str) -> str:
        if name == "":
            if not self.last:
                raise not_found("no previously declared queue")
            return self.last
        return name

    def owned_queue(self, name: str):
        """The queue `name` names, 404 when there is none, 405 when another
        connection holds it exclusively."""
        queue = self._vhost.queue(self.resolve(name))
        self._vhost.check_exclusive_access(queue, self._conn)
        return queue
