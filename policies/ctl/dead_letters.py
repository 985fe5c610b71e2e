"""amqpctl's dead-letter verbs, on the workbench's HTTP API:

    amqpctl list_dead_letters [-p VHOST] [QUEUE] [--reason R] [--body TEXT] ...
    amqpctl redrive [-p VHOST] QUEUE [filters] [--seq N ...] [--rate N]
    amqpctl redrive [-p VHOST] [QUEUE] --from-file AUDIT/replay-candidates.ndjson
    amqpctl move_messages [-p VHOST] QUEUE EXCHANGE [ROUTING_KEY] [--to-uri URI] [filters]
    amqpctl delete_dead_letters [-p VHOST] QUEUE [filters]
    amqpctl list_archived [-p VHOST] QUEUE [filters]
    amqpctl redrive_archived [-p VHOST] QUEUE [filters] [--event-id ID ...] [--again]

Without QUEUE, list_dead_letters lists the queues holding dead letters;
with it, their messages, peeked (nothing is consumed).  The actions run as
tasks in the broker; the verb follows the task and prints its progress.
It exits 0 when every chosen message went, 65 when some could not (not
found, unroutable, refused), 69 when the task failed (the other broker
unreachable, say), as rabbitmqctl's codes go.  A failure is one `Error:`
line on stderr.  With QUEUE, --from-file redrives only that queue's lines
(in VHOST) and says how many others it skipped.  The `_archived` verbs read
and redrive what retention archived out of QUEUE (docs/workbench.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from typing import Any
from urllib.parse import quote, urlencode

from amqp_server.remote_publisher import parse_uri
from dlx.redrive import Candidate, parse_candidates

from .api import AddVerb, Api, not_found_as, queue_path, vhost_path
from .output import EX_DATAERR, EX_UNAVAILABLE, EX_USAGE, CtlError, say, table

FILTER_FLAGS = (("--reason", "reason"), ("--original-queue", "original_queue"),
                ("--original-exchange", "original_exchange"), ("--since", "since"),
                ("--until", "until"), ("--message-id", "message_id"), ("--body", "body"))
QUEUE_COLUMNS = ["name", "why", "messages_ready", "messages_paged_out", "consumers"]
MESSAGE_COLUMNS = ["seq", "message_id", "reason", "original_queue", "original_exchange",
                   "first_died_at", "death_count", "origin", "payload_bytes"]
POLL_SECONDS = 0.2


def _filter(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for _flag, key in FILTER_FLAGS
            if getattr(args, key) is not None}


# ---- listing -----------------------------------------------------------------

def list_dead_letters(api: Api, args: argparse.Namespace) -> None:
    if args.queue is None:
        say(args, f"Listing dead-letter queues for vhost {args.vhost} ...")
        try:
            rows = api.call("GET", f"/dead-letter-queues/{vhost_path(args.vhost)}")
        except CtlError as exc:
            raise not_found_as(api, args.vhost, exc, f"vhost '{args.vhost}'") from None
        table(args, QUEUE_COLUMNS, rows)
        return
    say(args, f"Listing dead letters in queue {args.queue} of vhost {args.vhost} ...")
    query = urlencode({**_filter(args), "offset": args.offset, "limit": args.limit})
    try:
        page = api.call("GET", f"{queue_path(args.vhost, args.queue)}/messages?{query}")
    except CtlError as exc:
        raise not_found_as(api, args.vhost, exc,
                            f"queue '{args.queue}' in vhost '{args.vhost}'") from None
    rows = []
    for message in page["messages"]:
        origin = message["origin"]
        rows.append({**message, "message_id": message["properties"].get("message_id"),
                     # x-death's time: when it first died so (see README).
                     "first_died_at": _time(message["died_at"]),
                     "origin": f"{origin['exchange'] or '(default)'} "
                               f"{','.join(origin['routing_keys'])}" if origin else None})
    table(args, MESSAGE_COLUMNS, rows)
    hidden = page["messages_paged_out"] + page["messages_delayed"]
    if hidden:
        say(args, f"({hidden} messages paged to disk or delayed are not shown)")


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# ---- the archive ---------------------------------------------------------------

ARCHIVE_COLUMNS = ["event_id", "message_id", "reason", "original_queue", "first_died_at",
                   "archived_at", "redriven_at", "payload_bytes"]


def list_archived(api: Api, args: argparse.Namespace) -> None:
    say(args, f"Listing archived dead letters of queue {args.queue} in vhost {args.vhost} ...")
    query = urlencode({**_filter(args), "offset": args.offset, "limit": args.limit})
    try:
        page = api.call("GET", f"{queue_path(args.vhost, args.queue)}/archive?{query}")
    except CtlError as exc:
        raise not_found_as(api, args.vhost, exc,
                            f"queue '{args.queue}' in vhost '{args.vhost}'") from None
    table(args, ARCHIVE_COLUMNS, [
        {**message, "message_id": message["properties"].get("message_id"),
         "first_died_at": _time(message["died_at"]),
         "archived_at": _time(message["archived_at"] / 1e6 if message["archived_at"] else None),
         "redriven_at": _time(message["redriven_at"])} for message in page["messages"]])


def redrive_archived(api: Api, args: argparse.Namespace) -> None:
    body: dict[str, Any] = ({"event_ids": args.event_id} if args.event_id
                            else {"filter": _filter(args)})
    body["again"] = args.again
    try:
        result = api.call("POST", f"{queue_path(args.vhost, args.queue)}/archive/redrive",
                          body)
    except CtlError as exc:
        raise not_found_as(api, args.vhost, exc,
                            f"queue '{args.queue}' in vhost '{args.vhost}'") from None
    parts = [f"{result['redriven']} redriven"]
    if result["missing"]:
        parts.append(f"{len(result['missing'])} not in the archive")
    reasons: defaultdict[str, int] = defaultdict(int)
    for kept in result["kept"]:
        reasons[kept["why"]] += 1
    parts.extend(f"{count} kept: {why}" for why, count in reasons.items())
    print(", ".join(parts))
    if result["missing"] or result["kept"]:
        raise CtlError("some archived dead letters were not redriven", EX_DATAERR)


# ---- actions -----------------------------------------------------------------

def _selection(args: argparse.Namespace) -> dict[str, Any]:
    if args.seq:
        return {"seqs": args.seq}
    return {"filter": _filter(args)}


def redrive(api: Api, args: argparse.Namespace) -> None:
    if args.from_file:
        _redrive_candidates(api, args)
        return
    if args.queue is None:
        raise CtlError("redrive needs a QUEUE, or --from-file", EX_DATAERR)
    say(args, f"Redriving dead letters of queue {args.queue} in vhost {args.vhost} "
               "to where they came from ...")
    _run(api, args, args.vhost, args.queue, "redrive", {**_selection(args), "rate": args.rate})


def move_messages(api: Api, args: argparse.Namespace) -> None:
    target = ""
    if args.to_uri:
        try:
            target = f"on {parse_uri(args.to_uri).shown} "  # never its password
        except ValueError as exc:
            raise CtlError(f"--to-uri: {exc}", EX_USAGE) from None
    say(args, f"Moving messages of queue {args.queue} in vhost {args.vhost} to exchange "
               f"'{args.exchange}' {target}...")
    body = {**_selection(args), "rate": args.rate, "exchange": args.exchange}
    if args.routing_key is not None:
        body["routing_key"] = args.routing_key
    if args.to_uri:
        body["uri"] = args.to_uri
    _run(api, args, args.vhost, args.queue, "move", body)


def delete_dead_letters(api: Api, args: argparse.Namespace) -> None:
    say(args, f"Deleting messages of queue {args.queue} in vhost {args.vhost} ...")
    _run(api, args, args.vhost, args.queue, "delete-messages",
         {**_selection(args), "rate": args.rate})


def _redrive_candidates(api: Api, args: argparse.Namespace) -> None:
    """The audit's replay-candidates.ndjson: exactly the messages it names,
    one task per dead-letter queue; the ones not found are reported."""
    try:
        with open(args.from_file) as handle:
            candidates = parse_candidates(handle.read())
    except OSError as exc:
        raise CtlError(f"cannot read {args.from_file}: {exc.strerror}", EX_DATAERR) from None
    except ValueError as exc:
        raise CtlError(f"{args.from_file}: {exc}", EX_DATAERR) from None
    by_queue: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_queue[(candidate.vhost, candidate.queue)].append(candidate)
    if args.queue is not None:
        wanted = (args.vhost, args.queue)
        others = sum(len(named) for key, named in by_queue.items() if key != wanted)
        by_queue = {wanted: by_queue[wanted]} if wanted in by_queue else {}
        candidates = by_queue.get(wanted, [])
        if others:
            say(args, f"Skipping {others} replay candidates of queues other than "
                       f"{args.queue} in vhost {args.vhost}")
    say(args, f"Redriving {len(candidates)} replay candidates from {args.from_file} "
               f"in {len(by_queue)} queues ...")
    worst = 0
    for (vhost, queue), named in sorted(by_queue.items()):
        body = {"messages": [{"message_id": c.message_id, "body_sha256": c.body_sha256}
                             for c in named], "rate": args.rate}
        try:
            _run(api, args, vhost, queue, "redrive", body)
        except CtlError as exc:
            if exc.code == EX_UNAVAILABLE and "unable to reach" in str(exc):
                raise
            # One Error: line at the end; each queue's trouble above it.
            print(f"{queue} in vhost {vhost}: {exc}", file=sys.stderr)
            worst = max(worst, exc.code)
    if worst:
        raise CtlError("some replay candidates were not redriven (above)", worst)


def _run(api: Api, args: argparse.Namespace, vhost: str, queue: str, action: str,
         body: dict[str, Any]) -> None:
    try:
        started = api.call("POST", f"{queue_path(vhost, queue)}/{action}", body)
    except CtlError as exc:
        raise not_found_as(api, vhost, exc, f"queue '{queue}' in vhost '{vhost}'") from None
    if "task" not in started:  # a stream's: done at once (workbench_routes._stream_redrive)
        _stream_redriven(api, args, vhost, queue, body, started)
        return
    for missing in started.get("missing", []):
        say(args, f"not found in {queue}: message_id {missing['message_id']} "
                   f"body_sha256 {missing['body_sha256']}")
    task = _follow(api, args, started["task"])
    summary = _summary(task, len(started.get("missing", [])))
    if args.formatter == "json":
        print(json.dumps({**task, "missing": started.get("missing", [])}))
    elif task["state"] != "failed":
        say(args, f"Task {task['id']} {task['state']}: {summary}")
    if task["state"] == "failed":
        # One line says it all: why, and how far it got.
        raise CtlError(f"task {task['id']} failed: {task['error']} ({summary})",
                       EX_UNAVAILABLE)
    if task["failed"] or task["not_found"] or started.get("missing"):
        raise CtlError(f"{task['failed'] + task['not_found'] + len(started.get('missing', []))}"
                       f" of the chosen messages were not {_done_word(task['kind'])}",
                       EX_DATAERR)


# A stream's redrive reads at most 10,000 messages a request: a stream of
# a billion is read through in these many requests at most.
STREAM_READS = 100_000


def _stream_redriven(api: Api, args: argparse.Namespace, vhost: str, queue: str,
                     body: dict[str, Any], answer: dict[str, Any]) -> None:
    """A stream's redrive of replay candidates, read on from where each
    answer stopped (`next_offset`) while the stream goes on (`more`); the
    candidates no read found are reported, as a queue's are."""
    path = f"{queue_path(vhost, queue)}/redrive"
    found: set[tuple[Any, str]] = set()
    redriven = before = 0
    kept: list[str] = []
    for _ in range(STREAM_READS):
        redriven += len(answer["redriven"])
        before += len(answer["already_redriven"])
        kept.extend(item["why"] for item in answer["kept"])
        found.update((item.get("message_id"), item["body_sha256"])
                     for item in answer.get("found", []))
        if not answer.get("more"):
            break
        answer = api.call("POST", path, {**body, "offset": answer["next_offset"]})
    missing = [named for named in body.get("messages", [])
               if (named.get("message_id"), named["body_sha256"]) not in found]
    for named in missing:
        say(args, f"not found in {queue}: message_id {named['message_id']} "
                   f"body_sha256 {named['body_sha256']}")
    if args.formatter == "json":
        print(json.dumps({"queue": queue, "redriven": redriven, "already_redriven": before,
                          "kept": kept, "missing": missing}))
    else:
        say(args, f"{queue} (a stream, which keeps them): {redriven} redriven to origin, "
                   f"{before} left as redriven before, {len(kept)} kept")
    if kept or missing:
        raise CtlError(f"{len(kept) + len(missing)} of the chosen messages were not redriven",
                       EX_DATAERR)


def _follow(api: Api, args: argparse.Namespace, task_id: str) -> dict[str, Any]:
    """Poll the task until it ends, printing progress as it changes."""
    shown = None
    while True:
        task: dict[str, Any] = api.call("GET", f"/tasks/{quote(task_id, safe='')}")
        progress = (task["done"], task["total"])
        if progress != shown and task["state"] == "running":
            say(args, f"  {task['done']}/{task['total']} ...")
            shown = progress
        if task["state"] != "running":
            return task
        time.sleep(POLL_SECONDS)


def _done_word(kind: str) -> str:
    return {"redrive": "redriven", "move": "moved", "delete": "deleted"}[kind]


def _summary(task: dict[str, Any], missing: int) -> str:
    parts = [f"{task['moved']} of {task['total'] + missing} {_done_word(task['kind'])}"]
    if task["not_found"] or missing:
        parts.append(f"{task['not_found'] + missing} not found")
    for reason, count in task["failures"].items():
        parts.append(f"{count} kept: {reason}")
    if task["duplicates"]:
        parts.append(f"{task['duplicates']} possibly duplicated")
    return ", ".join(parts)


# ---- parsing -------------------------------------------------------------------

def register(verb: AddVerb) -> None:
    def filters(sub: argparse.ArgumentParser) -> None:
        for flag, key in FILTER_FLAGS:
            sub.add_argument(flag, dest=key, default=None)

    def action(sub: argparse.ArgumentParser) -> None:
        filters(sub)
        sub.add_argument("--seq", type=int, action="append",
                         help="only the message with this seq (repeatable)")
        sub.add_argument("--rate", type=float, default=1000,
                         help="messages per second at most (0: no limit)")

    listing = verb("list_dead_letters", list_dead_letters,
                   "list queues holding dead letters, or a queue's dead letters")
    listing.add_argument("queue", nargs="?")
    filters(listing)
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--limit", type=int, default=100)
    sub = verb("redrive", redrive, "send dead letters back where they came from")
    sub.add_argument("queue", nargs="?")
    sub.add_argument("--from-file", help="the audit's replay-candidates.ndjson")
    action(sub)
    sub = verb("move_messages", move_messages,
               "move messages to an exchange, here or on another broker (--to-uri)")
    sub.add_argument("queue")
    sub.add_argument("exchange", help="'' for the default exchange")
    sub.add_argument("routing_key", nargs="?")
    sub.add_argument("--to-uri", help="amqp://user:pass@host:port/vhost of another broker")
    action(sub)
    sub = verb("delete_dead_letters", delete_dead_letters, "delete chosen messages of a queue")
    sub.add_argument("queue")
    action(sub)
    sub = verb("list_archived", list_archived,
               "list the dead letters retention archived out of a queue")
    sub.add_argument("queue")
    filters(sub)
    sub.add_argument("--offset", type=int, default=0)
    sub.add_argument("--limit", type=int, default=100)
    sub = verb("redrive_archived", redrive_archived,
               "send archived dead letters back where they came from")
    sub.add_argument("queue")
    filters(sub)
    sub.add_argument("--event-id", action="append",
                     help="only the archived record with this event_id (repeatable)")
    sub.add_argument("--again", action="store_true",
                     help="redrive records that were redriven before too")
