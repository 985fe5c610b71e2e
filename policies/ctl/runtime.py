"""amqpctl verbs about what runs on the node now: its connections and
consumers, closing a connection, and the node's status, as rabbitmqctl
names and prints them, read from the management API (so the API's
permission checks apply to them as to every other verb)."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from .api import AddVerb, Api, vhost_path
from .output import EX_DATAERR, CtlError, columns, say, table

# rabbitmqctl's info keys that the management API fills here.
CONNECTION_COLUMNS = ("auth_mechanism", "channel_max", "channels", "client_properties",
                      "connected_at", "frame_max", "host", "name", "peer_host", "peer_port",
                      "port", "protocol", "ssl", "state", "timeout", "user", "vhost")
CONNECTION_DEFAULT = ["user", "peer_host", "peer_port", "state"]
# channel_pid names the channel as the API does ("<connection> (<number>)"):
# there is no Erlang process to name.
CONSUMER_COLUMNS = ("ack_required", "active", "activity_status", "arguments", "channel_pid",
                    "consumer_tag", "prefetch_count", "queue_name")
CONSUMER_DEFAULT = ["queue_name", "channel_pid", "consumer_tag", "ack_required",
                    "prefetch_count", "active", "arguments"]
GB = 1024 ** 3


def list_connections(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, CONNECTION_COLUMNS, CONNECTION_DEFAULT)
    say(args, "Listing connections ...")
    table(args, shown, api.call("GET", "/connections"))


def list_consumers(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, CONSUMER_COLUMNS, CONSUMER_DEFAULT)
    say(args, f"Listing consumers in vhost {args.vhost} ...")
    rows = [{**consumer, "queue_name": consumer["queue"]["name"],
             "channel_pid": consumer["channel_details"]["name"]}
            for consumer in api.call("GET", f"/consumers/{vhost_path(args.vhost)}")]
    table(args, shown, rows)


def close_connection(api: Api, args: argparse.Namespace) -> None:
    say(args, f"Closing connection {args.name}, reason: {args.explanation}...")
    api.call("DELETE", f"/connections/{quote(args.name, safe='')}",
             headers={"X-Reason": args.explanation},
             missing=CtlError(f"connection '{args.name}' not found (list_connections "
                              "name shows the names)", EX_DATAERR))


def status(api: Api, args: argparse.Namespace) -> None:
    """rabbitmqctl status's sections this broker has: runtime, alarms,
    memory, file descriptors, disk, totals and listeners."""
    # A cluster lists every member; the leader's entry has the whole node.
    node = next(node for node in api.call("GET", "/nodes") if "os_pid" in node)
    report = status_report(node, api.overview(), len(api.call("GET", "/vhosts")))
    if args.formatter == "json":
        print(json.dumps(report))
        return
    say(args, f"Status of node {report['node_name']} ...")
    print("\n".join(status_lines(report)))


def status_report(node: dict[str, Any], overview: dict[str, Any],
                  vhost_count: int) -> dict[str, Any]:
    """rabbitmqctl status --formatter json's keys, for what there is here."""
    alarms = [{"resource": resource, "node": node["name"]}
              for resource, key in (("disk", "disk_free_alarm"), ("memory", "mem_alarm"))
              if node.get(key)]
    totals = overview["object_totals"]
    return {
        "node_name": node["name"],
        "pid": int(node["os_pid"]),
        "uptime": node["uptime"] // 1000,
        "product_name": overview["product_name"],
        "product_version": overview["product_version"],
        "alarms": alarms,
        "memory": {"total": {"rss": node["mem_used"]}},
        "vm_memory_calculation_strategy": node["mem_calculation_strategy"],
        "vm_memory_high_watermark_limit": node["mem_limit"],
        "file_descriptors": {"total_used": node["fd_used"], "total_limit": node["fd_total"],
                             "sockets_used": node["sockets_used"],
                             "sockets_limit": node["sockets_total"]},
        "disk_free": node["disk_free"],
        "disk_free_limit": node["disk_free_limit"],
        "totals": {"virtual_host_count": vhost_count,
                   "connection_count": totals["connections"],
                   "queue_count": totals["queues"]},
        "listeners": [{"node": node["name"], "interface": entry.get("ip_address", ""),
                       "port": entry["port"], "protocol": entry["protocol"]}
                      for entry in overview.get("listeners", [])],
    }


def status_lines(report: dict[str, Any]) -> list[str]:
    alarms = [f"{a['resource']} alarm on node {a['node']}" for a in report["alarms"]]
    fds, totals = report["file_descriptors"], report["totals"]
    return [
        "Runtime", "",
        f"OS PID: {report['pid']}",
        f"Uptime (seconds): {report['uptime']}",
        f"Product: {report['product_name']} {report['product_version']}",
        f"Node name: {report['node_name']}", "",
        "Alarms", "",
        *(alarms or ["(none)"]), "",
        "Memory", "",
        f"Total memory used: {_gb(report['memory']['total']['rss'])} gb",
        f"Calculation strategy: {report['vm_memory_calculation_strategy']}",
        f"Memory high watermark: {_gb(report['vm_memory_high_watermark_limit'])} gb", "",
        "File Descriptors", "",
        f"Total: {fds['total_used']}, limit: {fds['total_limit']}",
        f"Sockets: {fds['sockets_used']}, limit: {fds['sockets_limit']}", "",
        "Free Disk Space", "",
        f"Low free disk space watermark: {_gb(report['disk_free_limit'])} gb",
        f"Free disk space: {_gb(report['disk_free'])} gb", "",
        "Totals", "",
        f"Connection count: {totals['connection_count']}",
        f"Queue count: {totals['queue_count']}",
        f"Virtual host count: {totals['virtual_host_count']}", "",
        "Listeners", "",
        *(f"Interface: {entry['interface']}, port: {entry['port']}, "
          f"protocol: {entry['protocol']}" for entry in report["listeners"]),
    ]


def cluster_status(api: Api, args: argparse.Namespace) -> None:
    """rabbitmqctl cluster_status's view of this cluster: its name, the
    leader, every member with its role, whether it is in sync and how far
    behind it is (a single broker is a cluster of one)."""
    nodes = api.call("GET", "/nodes")
    # A single broker's node names no role: it is a cluster of one.
    single = len(nodes) == 1 and "role" not in nodes[0]
    listed = [{"name": n["name"], "role": "leader" if single else n.get("role"),
               "in_sync": True if single else n.get("in_sync"),
               "replication_lag": 0 if single else n.get("replication_lag")} for n in nodes]
    report = {
        "cluster_name": api.overview().get("cluster_name", ""),
        "leader": next((n["name"] for n in listed if n["role"] == "leader"), None),
        "nodes": listed,
    }
    if args.formatter == "json":
        print(json.dumps(report))
        return
    say(args, f"Cluster status of node {report['leader']} ...")
    print("\n".join(cluster_lines(report)))


def cluster_lines(report: dict[str, Any]) -> list[str]:
    def described(node: dict[str, Any]) -> str:
        lag = node["replication_lag"]
        return (f"{node['name']}: {node['role']}, "
                f"{'in sync' if node['in_sync'] else 'not in sync'}"
                + (f", {lag} behind" if lag else ""))
    return ["Basics", "", f"Cluster name: {report['cluster_name']}", "",
            "Leader", "", str(report["leader"]), "",
            "Nodes", "", *(described(node) for node in report["nodes"])]


def _gb(size: int) -> float:
    return round(size / GB, 4)


def register(verb: AddVerb) -> None:
    verb("list_connections", list_connections,
         "list connections").add_argument("columns", nargs="*")
    verb("list_consumers", list_consumers,
         "list consumers in a vhost").add_argument("columns", nargs="*")
    close = verb("close_connection", close_connection, "close a connection by name")
    close.add_argument("name", help="the connection's name, as list_connections name shows it")
    close.add_argument("explanation", help="the reason the client is told")
    verb("status", status, "the node's status")
    verb("cluster_status", cluster_status,
         "the cluster's leader and members: role, in sync, replication lag")
