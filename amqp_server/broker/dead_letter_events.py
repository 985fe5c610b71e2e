"""Dead-letter log lines (fields in dlx/events.py), built in two parts: what
messages that died together share (queue, reason, routing, death history)
is serialised here once per plan; each message adds its own properties,
headers, outcome and body digest in the log's writer process
(`storage/dead_letter_lines.py`), from the content header and body as they
were stored."""

from __future__ import annotations

from json.encoder import encode_basestring

from dlx.dead_letter import Republish
from dlx.deaths import record_death
from dlx.events import deaths_json

from ..storage.dead_letter_lines import encode_json, json_text


def event_common(vhost: str, queue: str, reason: str, letter, target: str | None,
                 now: int, plan: Republish | None = None) -> str:
    """The shared fields, as JSON members without the braces; `target` is the
    exchange the death was meant for (dead-letter exchange or address)."""
    if plan is not None:
        history = plan.history
        dl_keys = list(plan.routing_keys)
    else:
        # Dropped before a plan: record the death anyway, so the audit sees it.
        bcc = set(letter.bcc)
        history = record_death(letter.history, queue, reason, letter.exchange,
                               tuple(k for k in letter.routing_keys if k not in bcc),
                               letter.expiration, now)
        dl_keys = []
    first = history.first or (None, None, None)
    bcc = set(letter.bcc)
    common = {
        "vhost": vhost, "queue": queue, "reason": reason, "exchange": letter.exchange,
        "routing_keys": [k for k in letter.routing_keys if k not in bcc],
        "dead_letter_exchange": target,
        "dead_letter_routing_keys": dl_keys,
        "deaths": deaths_json(history),
        "first_death_reason": first[0], "first_death_queue": first[1],
        "first_death_exchange": first[2],
    }
    return encode_json(common)[1:-1]


def event_head(common: str, now: float, cause: str | None, targets: list[str]) -> str:
    """What messages dying in one batch with one outcome share."""
    return (f'{{{common},"time":{int(now * 1_000_000)},'
            f'"outcome":"{"dropped" if cause else "dead_lettered"}",'
            f'"drop_cause":{json_text(cause)},'
            f'"target_queues":[{",".join(map(encode_basestring, targets))}]')


ARCHIVED = "archived"


def archive_head(vhost: str, queue: str, exchange: str, routing_keys, history,
                 now: float) -> str:
    """The shared fields of the record of a dead letter that retention
    archived out of `queue` (its dead letter queue): the reason of its
    latest death, its whole history, no target.  The same head starts its
    archive record and its dead-letter log line."""
    first = history.first or (None, None, None)
    common = {
        "vhost": vhost, "queue": queue, "reason": history.deaths[0].reason,
        "exchange": exchange, "routing_keys": list(routing_keys),
        "dead_letter_exchange": None, "dead_letter_routing_keys": [],
        "deaths": deaths_json(history),
        "first_death_reason": first[0], "first_death_queue": first[1],
        "first_death_exchange": first[2],
    }
    return (f'{encode_json(common)[:-1]},"time":{int(now * 1_000_000)},'
            f'"outcome":"{ARCHIVED}","drop_cause":null,"target_queues":[]')
