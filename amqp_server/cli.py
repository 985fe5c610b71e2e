"""`amqp-server`: start the broker on embedded defaults, or as flags and a
TOML file say."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from dlx.semantics import MODES as SEMANTICS_MODES

from .broker.broker import Broker
from .config import BrokerConfig, ConfigError
from .loops import new_event_loop
from .node import ClusterError, ClusterNode
from .server import ListenError, Server, tune_gc
from .storage.lock import DataDirError

log = logging.getLogger("amqp_server")


# The flag that sets each listener's port (Refusal.listener).
PORT_FLAGS = {"AMQP": "--port", "AMQPS": "--tls-port", "management": "--management-port",
              "Prometheus": "--prometheus-port"}


def listen_advice(error: ListenError) -> list[str]:
    """The flags that start the broker beside whatever holds its ports (on
    a machine where RabbitMQ runs, every default one is taken), or on an
    address it can have."""
    advice = []
    flags = [PORT_FLAGS[refusal.listener] for refusal in error.ports_in_the_way]
    if flags:
        picks = "picks a free port" if len(flags) == 1 else "pick free ports"
        line = f"{' '.join(f'{flag} 0' for flag in flags)} {picks} instead (printed at start)"
        optional = [flag for flag in flags if flag != "--port"]
        if optional:
            line += f"; {' or '.join(f'{flag} -1' for flag in optional)} turns that listener off"
        advice.append(line + ".")
    if error.host_in_the_way:
        advice.append("--host must name an address of this machine (127.0.0.1, the default, "
                      "or 0.0.0.0 for every interface).")
    return advice


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="amqp-server",
        description="AMQP 0-9-1 broker with first-class dead-lettering.")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int,
                        help="AMQP port (default 5672; 0 picks a free one and logs it)")
    parser.add_argument("--tls-port", type=int,
                        help="amqps port, when the config sets a certificate (default 5671; "
                             "0 picks a free one, -1 turns it off)")
    parser.add_argument("--management-port", type=int,
                        help="management HTTP API port (default 15672; 0 picks a free one, "
                             "-1 turns it off)")
    parser.add_argument("--prometheus-port", type=int,
                        help="Prometheus metrics port (default 15692; 0 picks a free one, "
                             "-1 turns it off)")
    parser.add_argument("--data-dir", help="where durable data lives (default ./amqp-data)")
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help="log verbosity (default info)")
    parser.add_argument("--rabbitmq-semantics", choices=list(SEMANTICS_MODES),
                        help="whose queue and dead-letter behaviour to follow: RabbitMQ "
                             "3.13's (the default) or 4.3's; a virtual host may choose its "
                             "own (docs/choosing-semantics.md)")
    cluster = parser.add_argument_group(
        "clustering", "a node of a cluster decided by etcd (docs/clustering.md); the "
        "shared secret comes from the config file's cluster_secret or "
        "AMQP_SERVER_CLUSTER_SECRET")
    cluster.add_argument("--cluster-etcd", metavar="URL[,URL...]",
                         help="etcd client URLs; without them the broker is a single node")
    cluster.add_argument("--node-name", help="this node's name (default: the host name)")
    cluster.add_argument("--cluster-port", type=int,
                         help="port for the other nodes (default 5679; 0 picks a free one)")
    return parser.parse_args(argv)


async def serve(config: BrokerConfig) -> None:
    tune_gc()
    if config.cluster_etcd:
        await serve_node(config)
        return
    server = Server(Broker(config))
    await server.start()
    print(f"amqp-server listening on {server.host}:{server.port}", flush=True)
    if server.tls_listening:
        print(f"amqps listening on {server.host}:{server.tls_port}", flush=True)
    if server.management is not None:
        print(f"management API on http://{server.host}:{server.management.port}/api/",
              flush=True)
    if server.prometheus is not None:
        print(f"Prometheus metrics on http://{server.host}:{server.prometheus.port}/metrics",
              flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()


async def serve_node(config: BrokerConfig) -> None:
    node = ClusterNode(config)
    await node.start()
    ports = node.ports
    print(f"amqp-server node {node.node} of cluster {config.cluster_name}: AMQP on "
          f"{config.host}:{ports['amqp']}, cluster port {ports['cluster']}", flush=True)
    if "management" in ports:
        print(f"management API on http://{config.host}:{ports['management']}/api/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await node.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = BrokerConfig.load(args.config, host=args.host, port=args.port,
                                   tls_port=args.tls_port,
                                   management_port=args.management_port,
                                   prometheus_port=args.prometheus_port,
                                   data_dir=args.data_dir, log_level=args.log_level,
                                   rabbitmq_semantics=args.rabbitmq_semantics,
                                   cluster_etcd=args.cluster_etcd, node_name=args.node_name,
                                   cluster_port=args.cluster_port,
                                   cluster_secret=os.environ.get("AMQP_SERVER_CLUSTER_SECRET"))
    except ConfigError as exc:
        print(f"amqp-server: {exc}", file=sys.stderr)
        return 2
    if not 0 <= config.port <= 65535:
        print(f"amqp-server: --port must be 0-65535, got {config.port}", file=sys.stderr)
        return 2
    for flag, port in (("--tls-port", config.tls_port),
                       ("--management-port", config.management_port),
                       ("--prometheus-port", config.prometheus_port)):
        if port > 65535:
            print(f"amqp-server: {flag} must be at most 65535, got {port}", file=sys.stderr)
            return 2
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(config))
    except ConfigError as exc:
        print(f"amqp-server: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        for line in [*map(str, exc.refusals), *listen_advice(exc)]:
            print(f"amqp-server: {line}", file=sys.stderr)
        return 1
    except (DataDirError, ClusterError) as exc:
        print(f"amqp-server: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # anything else the system refused, as it said it
        print(f"amqp-server: {exc}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    return 0
