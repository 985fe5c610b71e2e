"""The dead-letter workbench's reading side: which queues hold dead letters,
a page of a queue's messages as JSON (peeked, never consumed), and the
messages an action is to take (chosen by seq, by filter, or named by the
audit's replay candidates).

Messages are read with `broker.peek.peek`, which walks the ready messages
held in memory in delivery order and decodes a copy of their properties:
nothing is marked delivered or redelivered.  Messages a long queue has
paged to disk and those waiting out a redelivery delay are not visible;
each page says how many there are.

Queues are known to hold dead letters by name (`_DLQ`, `DLQ.`, `EXP.`),
by being marked by a user, by being bound to an exchange that some queue
dead-letters to, or by the messages at their head carrying `x-death` or
`_AMQ_ORIG_ADDRESS` without `x-redrive-count`: a redriven message keeps its
`x-death`, and one back in the work queue it was redriven to says nothing
of that queue (one that died again after its redrive is in a queue found
by the other signs).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from dlx.addresses import death_target
from dlx.redrive import (
    Filter,
    body_digest,
    facts_of,
    is_dead_letter,
    named_like_dead_letters,
    origin_of,
    redrive_count,
)
from dlx.text import as_optional_text

from ..broker.peek import PeekedMessage, peek
from .shapes import jsonable

# Messages looked at, from the head, to tell whether a queue holds dead letters.
SAMPLED = 20
PAGE_DEFAULT = 50
PAGE_MAX = 500
BODY_SHOWN = 64 * 1024


class Marks:
    """Queues users marked as holding dead letters, kept in the data
    directory when the broker has one."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.marked: set[tuple[str, str]] = set()
        if path is not None and path.exists():
            try:
                self.marked = {tuple(item) for item in json.loads(path.read_text())}
            except (OSError, ValueError, TypeError):
                self.marked = set()

    def set(self, vhost: str, queue: str, marked: bool) -> None:
        if marked:
            self.marked.add((vhost, queue))
        else:
            self.marked.discard((vhost, queue))
        if self.path is not None:
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(sorted(self.marked)))
            temporary.replace(self.path)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self.marked


def marks_for(broker) -> Marks:
    directory = Path(broker.config.data_dir) if broker.journal is not None else None
    return Marks(directory / "workbench-marks.json" if directory is not None else None)


def dead_letter_targets(vhost) -> set[str]:
    """Exchanges some queue of `vhost` sends its dead (or expired) letters to."""
    names = set()
    for queue in vhost.queues.values():
        for reason in ("rejected", "expired"):
            name = death_target(reason, queue.name, queue.settings).exchange
            if name is not None:
                names.add(name)
    return names


def why_dead_letters(broker, vhost, queue, marks: Marks, targets: set[str]) -> str | None:
    """Why the workbench lists `queue`, or None."""
    if (vhost.name, queue.name) in marks:
        return "marked"
    if named_like_dead_letters(queue.name):
        return "name"
    if any(source in targets for source, _key in queue.bindings):
        return "dead-letter exchange"
    for message in peek(broker, queue.name, vhost.name, SAMPLED):
        if is_dead_letter(message.headers) and not redrive_count(message.headers):
            return "x-death" if message.deaths else "_AMQ_ORIG_ADDRESS"
    return None


def dead_letter_queue_json(queue, why: str) -> dict:
    # The type: the console browses a stream by offset and time, a queue
    # by position.
    return {"name": queue.name, "vhost": queue.vhost, "why": why,
            "type": queue.settings.queue_type,
            "messages_ready": queue.message_count,
            "messages_paged_out": queue.paged_count,
            "messages_delayed": queue.delayed_count,
            "messages_unacknowledged": queue.unacked,
            "consumers": len(queue.consumers)}


# ---- one message as the workbench shows it ---------------------------------------

def message_json(seq: int, message: PeekedMessage, exchanges, shown: int) -> dict:
    properties = message.properties
    headers = message.headers
    facts = facts_of(headers, as_optional_text(properties.get("message_id")))
    origin = origin_of(headers, message.routing_key, exchanges)
    body = message.body
    visible = body[:shown]
    try:
        text = visible.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "seq": seq,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "redelivered": message.redelivered,
        "properties": {k: jsonable(v) for k, v in properties.items() if k != "headers"},
        "headers": jsonable(headers),
        # Most recent first, as x-death keeps them.
        "deaths": [{"queue": d.queue, "reason": d.reason, "exchange": d.exchange,
                    "routing_keys": list(d.routing_keys), "count": d.count, "time": d.time,
                    "original_expiration": d.original_expiration} for d in message.deaths],
        "reason": facts.reason,
        "original_queue": facts.original_queue,
        "original_exchange": facts.original_exchange,
        "died_at": facts.died_at,
        "death_count": facts.deaths,
        "origin": None if origin is None else {
            "exchange": origin.exchange, "routing_keys": list(origin.routing_keys),
            "from": origin.source},
        "payload_bytes": len(body),
        "payload_sha256": body_digest(body),
        "payload_truncated": len(visible) < len(body),
        "payload_text": text,
        "payload_base64": base64.b64encode(visible).decode(),
    }



# ---- walking a queue --------------------------------------------------------------

def ready_messages(broker, queue, limit: int | None = None):
    """(seq, PeekedMessage) for the ready messages in memory, in delivery
    order.  `peek` and the seqs walk the same deque in the same turn of
    the loop, so they pair up."""
    seqs = [entry.seq for entry, _ in zip(queue.ready, range(limit or len(queue.ready)))]
    return zip(seqs, peek(broker, queue.name, queue.vhost, limit))


def matching(broker, queue, wanted: Filter, limit: int | None = None):
    """(seq, message) of the ready messages the filter takes."""
    if wanted.empty:
        yield from ready_messages(broker, queue, limit)
        return
    for seq, message in ready_messages(broker, queue):
        facts = facts_of(message.headers, as_optional_text(message.properties.get("message_id")))
        if wanted.matches(facts, message.body):
            yield seq, message


def page(broker, vhost, queue, wanted: Filter, offset: int, limit: int,
         shown: int = BODY_SHOWN) -> dict:
    """One page of the messages the filter takes, with the counts a reader
    needs to know what it is not seeing."""
    exchanges = vhost.exchanges
    window = None if not wanted.empty else offset + limit
    found = list(matching(broker, queue, wanted, window))
    chosen = found[offset:offset + limit]
    return {
        "vhost": vhost.name, "queue": queue.name,
        "messages_ready": queue.message_count,
        "messages_in_memory": len(queue.ready),
        # Not visible to a peek (README: the workbench).
        "messages_paged_out": queue.paged_count,
        "messages_delayed": queue.delayed_count,
        "matched": len(found) if not wanted.empty else len(queue.ready),
        "offset": offset, "limit": limit,
        "messages": [message_json(seq, message, exchanges, shown) for seq, message in chosen],
    }


def seqs_by_filter(broker, queue, wanted: Filter) -> list[int]:
    return [seq for seq, _ in matching(broker, queue, wanted)]


def seqs_by_candidates(broker, queue, candidates: list[tuple[str | None, str]]):
    """The seqs of the messages named by (message_id, body sha256), each
    candidate taking one message; and the candidates not found."""
    wanted: dict[tuple, int] = {}
    for key in candidates:
        wanted[key] = wanted.get(key, 0) + 1
    seqs = []
    for seq, message in ready_messages(broker, queue):
        key = (as_optional_text(message.properties.get("message_id")), body_digest(message.body))
        if wanted.get(key):
            wanted[key] -= 1
            seqs.append(seq)
    missing = [{"message_id": key[0], "body_sha256": key[1]}
               for key, left in wanted.items() for _ in range(left)]
    return seqs, missing
