"""amqpctl's verbs on a vhost's objects: list_queues, list_exchanges and
list_bindings with rabbitmqctl's columns, purge_queue, delete_queue,
delete_exchange, and the definitions of everything (export_definitions,
import_definitions)."""

from __future__ import annotations

import argparse
import json
import sys

from .api import AddVerb, Api, exchange_path, missing_vhost, queue_path, vhost_path
from .output import EX_DATAERR, CtlError, columns, say, table

# A stream's own columns (RabbitMQ's names; `stream` holds ours): empty in
# another queue's row, as rabbitmqctl leaves a key a queue type lacks.
STREAM_COLUMNS = ("leader", "members", "online", "segments", "committed_offset", "stream")
# A RabbitMQ 4.3 quorum queue's own columns (rabbit_quorum_queue:handle_tick/3;
# docs/choosing-semantics.md): empty in another queue's row.
QUORUM_4_3_COLUMNS = ("delivery_limit", "delayed_retry", "next_delayed_at", "last_delayed_at",
                      "messages_by_priority", "messages_active_priorities",
                      "messages_ready_returned")
# What each listing can show: the keys the management API fills in its rows.
VALID_COLUMNS = {
    "queues": ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type",
               "state", "messages", "messages_ready", "messages_unacknowledged",
               "messages_delayed", "message_bytes_ready", "messages_ram", "messages_paged_out",
               "message_bytes_paged_out", "consumers", "single_active_consumer_tag", "policy",
               "operator_policy", "effective_policy_definition", "dead_lettered",
               "dead_letter_dropped", "expired", "rejected_publishes", "dead_letter_held",
               *STREAM_COLUMNS, *QUORUM_4_3_COLUMNS),
    "exchanges": ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments",
                  "policy"),
    "bindings": ("source_name", "source_kind", "destination_name", "destination_kind",
                 "routing_key", "arguments", "properties_key", "vhost"),
}
DEFAULT_COLUMNS = {
    "queues": ["name", "messages"],
    "exchanges": ["name", "type"],
    "bindings": ["source_name", "source_kind", "destination_name", "destination_kind",
                 "routing_key", "arguments"],
}


def list_queues(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, VALID_COLUMNS["queues"], DEFAULT_COLUMNS["queues"])
    say(args, f"Listing queues for vhost {args.vhost} ...")
    table(args, shown, api.call("GET", f"/queues/{vhost_path(args.vhost)}"))


def list_exchanges(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, VALID_COLUMNS["exchanges"], DEFAULT_COLUMNS["exchanges"])
    say(args, f"Listing exchanges for vhost {args.vhost} ...")
    table(args, shown, api.call("GET", f"/exchanges/{vhost_path(args.vhost)}"))


def list_bindings(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, VALID_COLUMNS["bindings"], DEFAULT_COLUMNS["bindings"])
    say(args, f"Listing bindings for vhost {args.vhost}...")
    rows = [{"source_name": b["source"], "source_kind": "exchange",
             "destination_name": b["destination"], "destination_kind": b["destination_type"],
             **b} for b in api.call("GET", f"/bindings/{vhost_path(args.vhost)}")]
    table(args, shown, rows)


def purge_queue(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Purging queue "{args.name}" in vhost "{args.vhost}" ...')
    _on_queue(api, args, "DELETE", "/contents")


def delete_queue(api: Api, args: argparse.Namespace) -> None:
    say(args, f"Deleting queue '{args.name}' on vhost '{args.vhost}' ...")
    _on_queue(api, args, "DELETE", "")


def delete_exchange(api: Api, args: argparse.Namespace) -> None:
    say(args, f"Deleting exchange '{args.name}' on vhost '{args.vhost}' ...")
    query = "?if-unused=true" if args.if_unused else ""
    try:
        api.call("DELETE", f"{exchange_path(args.vhost, args.name)}{query}")
    except CtlError as exc:
        if str(exc) != "not found":
            raise
        raise missing_vhost(api, args.vhost) or CtlError(
            f"exchange '{args.name}' not found in vhost '{args.vhost}'", EX_DATAERR) from None


def _on_queue(api: Api, args: argparse.Namespace, method: str, suffix: str) -> None:
    api.call(method, f"{queue_path(args.vhost, args.name)}{suffix}",
             missing=CtlError(f"queue '{args.name}' not found in vhost '{args.vhost}'",
                              EX_DATAERR))


def export_definitions(api: Api, args: argparse.Namespace) -> None:
    document = api.call("GET", "/definitions")
    text = json.dumps(document, indent=2)
    if args.file == "-":
        print(text)
    else:
        with open(args.file, "w") as handle:
            handle.write(text)
        say(args, f"Exported definitions to {args.file}")


def import_definitions(api: Api, args: argparse.Namespace) -> None:
    try:
        with (sys.stdin if args.file == "-" else open(args.file)) as handle:
            document = json.load(handle)
    except OSError as exc:
        raise CtlError(f"cannot read {args.file}: {exc.strerror}", EX_DATAERR) from None
    except json.JSONDecodeError as exc:
        raise CtlError(f"{args.file} is not valid JSON: {exc}", EX_DATAERR) from None
    api.call("POST", "/definitions", document)
    say(args, f"Imported definitions from {args.file}")


def register(verb: AddVerb) -> None:
    for name, func in (("list_queues", list_queues), ("list_exchanges", list_exchanges),
                       ("list_bindings", list_bindings)):
        verb(name, func, name.replace("_", " ")).add_argument("columns", nargs="*")
    verb("purge_queue", purge_queue, "purge a queue").add_argument("name")
    verb("delete_queue", delete_queue, "delete a queue").add_argument("name")
    exchange = verb("delete_exchange", delete_exchange, "delete an exchange and its bindings")
    exchange.add_argument("--if-unused", action="store_true",
                          help="only if no queue or exchange is bound to it")
    exchange.add_argument("name")
    verb("export_definitions", export_definitions,
         "write definitions to FILE ('-' for stdout)").add_argument("file")
    verb("import_definitions", import_definitions,
         "load definitions from FILE ('-' for stdin)").add_argument("file")
