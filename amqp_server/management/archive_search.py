"""The workbench beside the archive: a queue's archived dead letters
(storage/archive.py) searched with the same filters as its live messages,
shown the same way, and redriven from there to where they came from.

An archived record keeps the message's content header as stored
(`content_header`) and its body in full, so the message is rebuilt byte
for byte and goes through the redrive of live messages (tasks.LocalTarget:
to its origin, with the redrive count, and only counted once the copy is
on disk).  The archive itself never changes: a redriven record stays, and
a ledger beside it says when it was redriven, so a search shows it and a
second redrive of it needs `again`.

Reading and searching files runs in a worker thread (the first search
loads pyarrow there, storage/archive_parquet.py: the event loop never
does); rebuilding and publishing on the event loop, as every publish does.
"""

from __future__ import annotations

import base64
import binascii

from dlx.deaths import history_from_headers
from dlx.redrive import Filter, facts_of

from ..broker.message import HEADER_PREFIX, Entry, Message
from ..broker.peek import PeekedMessage
from ..storage.archive import ArchiveFiles
from ..wire.properties import decode_properties
from .workbench import BODY_SHOWN, message_json

REDRIVE_MAX = 1000  # records one request redrives at most


class NotArchived(ValueError):
    """A record that cannot be rebuilt (no content header, or a broken one)."""


def rebuilt(record: dict) -> Message:
    """The message an archive record holds, as it was in its queue."""
    header = record.get("content_header")
    try:
        if not isinstance(header, bytes):
            raise TypeError("no content header")
        body = base64.b64decode(record["body"] or "", validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise NotArchived(f"record {record.get('event_id')} cannot be rebuilt: {exc}") \
            from None
    if not record.get("body_included", True):
        raise NotArchived(f"record {record.get('event_id')} has no body")
    keys = record.get("routing_keys") or [""]
    message = Message.to(record.get("exchange") or "", keys[0], header, body)
    message.routing_keys = tuple(keys)
    return message


def _peeked(message: Message) -> PeekedMessage:
    properties = decode_properties(message.header[HEADER_PREFIX:]).as_dict()
    return PeekedMessage(body=message.body, exchange=message.exchange,
                         routing_key=message.routing_key, properties=properties,
                         redelivered=False,
                         deaths=history_from_headers(properties.get("headers")).deaths)


def matching(files: ArchiveFiles, vhost: str, queue: str, wanted: Filter):
    """(record, message) of the queue's archived records the filter takes,
    oldest first (records that cannot be rebuilt are left out)."""
    for record in files.records(vhost, queue):
        try:
            message = rebuilt(record)
        except NotArchived:
            continue
        if not wanted.empty:
            headers = message.properties.headers
            facts = facts_of(headers, record.get("message_id"))
            if not wanted.matches(facts, message.body):
                continue
        yield record, message


def search(files: ArchiveFiles, vhost: str, queue: str, wanted: Filter):
    """(what the filter takes, the redriven ledger): the files' part of a
    page, for a worker thread."""
    return list(matching(files, vhost, queue, wanted)), files.redriven()


def page(files: ArchiveFiles, vhost, queue: str, found: list, redriven: dict, offset: int,
         limit: int, shown: int = BODY_SHOWN) -> dict:
    """One page of a queue's archived dead letters (`found` by `search`), as
    the workbench shows live ones, each with its event_id, when it was
    archived (µs) and redriven (s)."""
    shown_records = []
    for index, (record, message) in enumerate(found[offset:offset + limit]):
        item = message_json(offset + index, _peeked(message), vhost.exchanges, shown)
        item.update(event_id=record.get("event_id"), archived_at=record.get("time"),
                    redriven_at=redriven.get(record.get("event_id")))
        shown_records.append(item)
    return {"vhost": vhost.name, "queue": queue, "archive": str(files.directory),
            "matched": len(found), "offset": offset, "limit": limit,
            "messages": shown_records}


def chosen(files: ArchiveFiles, vhost: str, queue: str, body: dict,
           parse_filter) -> tuple[list[tuple[dict, Message]], list[str]]:
    """The records a redrive takes: `event_ids` (a list) or `filter` ({}:
    all); without `again`, those redriven before are left out.  Returns
    them and the event ids asked for but not in this queue's archive."""
    given = [key for key in ("event_ids", "filter") if key in body]
    if len(given) != 1:
        raise ValueError("say which archived messages: exactly one of event_ids (a list) or "
                         "filter (an object, {} for all)")
    again = body.get("again") is True
    redriven = files.redriven()
    if "event_ids" in body:
        ids = body["event_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("event_ids must be a list of strings")
        wanted_ids = dict.fromkeys(ids)
        found = {record["event_id"]: (record, message)
                 for record, message in matching(files, vhost, queue, Filter())
                 if record.get("event_id") in wanted_ids}
        picked = [found[i] for i in wanted_ids if i in found]
        missing = [i for i in wanted_ids if i not in found]
    else:
        if not isinstance(body["filter"], dict):
            raise ValueError("filter must be an object")
        picked = list(matching(files, vhost, queue, parse_filter(body["filter"])))
        missing = []
    if not again:
        picked = [(r, m) for r, m in picked if r.get("event_id") not in redriven]
    if len(picked) > REDRIVE_MAX:
        raise ValueError(f"{len(picked)} archived messages: redrive at most {REDRIVE_MAX} "
                         "at a time (narrow the filter)")
    return picked, missing


async def redrive(target, files: ArchiveFiles, picked: list[tuple[dict, Message]],
                  now: float, loop) -> dict:
    """Each picked record's message to its origin; the ledger notes those
    whose copy is safe.  Returns what became of them."""
    entries = [Entry(index, message) for index, (_record, message) in enumerate(picked)]
    outcome = await target.send(entries)
    ids = [picked[entry.seq][0]["event_id"] for entry in outcome.safe]
    if ids:
        await loop.run_in_executor(None, files.note_redriven, ids, now)
    return {"redriven": len(ids), "event_ids": ids,
            "kept": [{"event_id": picked[entry.seq][0]["event_id"], "why": why}
                     for entry, why in outcome.kept],
            "duplicates": outcome.duplicates}

