"""RabbitMQ's health checks and node view for probes and monitors:
/api/health/checks/{alarms,local-alarms,port-listener/{port},virtual-hosts},
ours /api/health/checks/dead-letter-archive,
/api/aliveness-test/{vhost}, /api/nodes and /api/nodes/{name}.

The answers are RabbitMQ 3.10's (rabbit_mgmt_wm_health_check_*): 200
{"status": "ok"} or 503 {"status": "failed", "reason": ...} with what
failed.  Any management user may ask the health checks; the aliveness test
needs access to the vhost and runs with the user's permissions, as the
management plugin's own channel does; the nodes need monitoring or
administrator.  This broker is one node, so cluster-wide and local alarms
are the same thing.
"""

from __future__ import annotations

from aiohttp import web

from ..broker.permissions import READ
from . import messages
from .node import node_json
from .requests import (
    BROKER,
    USER_KEY,
    BadRequest,
    access_control,
    changing_vhost,
    forwarded_by,
    grant_in,
)
from .shapes import NODE

LISTENERS = web.AppKey("listeners", object)  # () -> [{"protocol", "port", ...}]
# The queue RabbitMQ's aliveness test declares and leaves in place.
ALIVENESS_QUEUE = "aliveness-test"
# rabbit_alarm's resource names.
ALARM_RESOURCES = {"memory": "memory", "disk": "disk space"}


def _ok(**extra) -> web.Response:
    return web.json_response({"status": "ok", **extra})


def _failed(reason: str, **details) -> web.Response:
    return web.json_response({"status": "failed", "reason": reason, **details}, status=503)


def listeners(request: web.Request) -> list[dict]:
    """The broker's active listeners, as the server reports them."""
    return request.app[LISTENERS]()


def _alarm_check(reason: str):
    async def check(request: web.Request) -> web.Response:
        alarms = request.app[BROKER].alarms
        if not alarms:
            return _ok()
        return _failed(reason, alarms=[{"resource": ALARM_RESOURCES.get(a, a), "node": NODE}
                                       for a in sorted(alarms)])
    return check


def archive_status(broker) -> dict:
    """Retention's archive: where, how many archived, and what keeps it
    from taking records, if anything (broker/archiving.py)."""
    archiver = broker.archiver
    if archiver is None:
        return {"directory": None, "archived": 0, "problem": None, "problem_since": None}
    return {"directory": str(archiver.directory), "archived": archiver.archived,
            "problem": archiver.problem,
            "problem_since": None if archiver.problem_since is None
            else int(archiver.problem_since * 1000)}


async def dead_letter_archive(request: web.Request) -> web.Response:
    """Ours: fails while retention cannot write its archive (the dead
    letters then stay in their queues)."""
    status = archive_status(request.app[BROKER])
    if status["problem"] is None:
        return _ok(**status)
    return _failed(status["problem"], **status)


async def port_listener(request: web.Request) -> web.Response:
    text = request.match_info["port"]
    try:
        port = int(text, 10)
    except ValueError:
        raise BadRequest("Invalid port") from None
    ports = [listener["port"] for listener in listeners(request)]
    if port in ports:
        return _ok(port=port)
    return _failed("No active listener", missing=port, ports=ports)


async def virtual_hosts(request: web.Request) -> web.Response:
    # A vhost here has no process of its own that could be down: every
    # vhost that exists serves.
    return _ok()


async def aliveness_test(request: web.Request) -> web.Response:
    """Declare `aliveness-test`, publish a message to it through the default
    exchange and get one back without ack, all as the user, as RabbitMQ does."""
    vhost = changing_vhost(request)
    grant = grant_in(request, vhost)
    existed = ALIVENESS_QUEUE in vhost.queues
    grant.check_queue_declare(ALIVENESS_QUEUE, None, existed)
    queue = vhost.declare_queue(ALIVENESS_QUEUE, None)
    messages.publish(grant, vhost, vhost.exchange(""),
                     {"routing_key": ALIVENESS_QUEUE, "payload": "test_message"})
    grant.check(READ, "queue", ALIVENESS_QUEUE)
    vhost.check_exclusive_access(queue, None)
    if not messages.get(queue, 1, "ack_requeue_false", "auto", None):
        return _failed("the test message could not be got back from queue 'aliveness-test'")
    return _ok()


async def _nodes(request: web.Request) -> list[dict]:
    """This node, or every member of its cluster with its role, whether it
    is in the in-sync set and how many frames it is behind the leader."""
    broker = request.app[BROKER]
    own = node_json(broker, listeners(request))
    if broker.cluster is None:
        return [own]  # RabbitMQ's keys only: a single broker has no role to name
    listed = []
    for member in await broker.cluster.nodes():
        if member["name"] == broker.config.node_name:
            listed.append({**own, **member})
        else:
            listed.append({"type": "disc", **member})
    return listed


async def list_nodes(request: web.Request) -> web.Response:
    access_control(request).require_monitor(request[USER_KEY])
    return web.json_response(await _nodes(request))


async def get_node(request: web.Request) -> web.Response:
    access_control(request).require_monitor(request[USER_KEY])
    for node in await _nodes(request):
        if node["name"] == request.match_info["name"]:
            return web.json_response(node)
    raise KeyError(request.match_info["name"])  # 404 (RabbitMQ 3.10 answers 500)


def _asking_node(request: web.Request) -> str:
    """The node a health check was asked of: the member that forwarded it,
    or this one."""
    broker = request.app[BROKER]
    forwarded = forwarded_by(request, broker)
    return forwarded[2] if forwarded is not None else broker.config.node_name


async def node_is_in_sync(request: web.Request) -> web.Response:
    """Ours: 200 when the node asked is in its cluster's in-sync set (it
    holds every confirmed message and may be elected), 503 when not.  A
    single broker is always in sync with itself."""
    broker = request.app[BROKER]
    if broker.cluster is None:
        return _ok()
    name = _asking_node(request)
    for node in await broker.cluster.nodes():
        if node["name"] == name:
            if node["in_sync"]:
                return _ok(node=name)
            return _failed(f"node {name} is not in the in-sync set", node=name)
    return _failed(f"node {name} is not a member of the cluster", node=name)


async def node_is_quorum_critical(request: web.Request) -> web.Response:
    """RabbitMQ's check, for this cluster: 503 when stopping the node asked
    would take the in-sync set below min-in-sync, so that publishers would
    be held until another node catches up."""
    broker = request.app[BROKER]
    if broker.cluster is None:
        return _ok()
    name = _asking_node(request)
    in_sync = [node["name"] for node in await broker.cluster.nodes() if node["in_sync"]]
    if name in in_sync and len(in_sync) - 1 < broker.config.min_in_sync:
        return _failed("stopping this node would leave fewer copies in sync than "
                       f"min-in-sync ({broker.config.min_in_sync})", in_sync=in_sync)
    return _ok()


def add_routes(router) -> None:
    router.add_get("/api/health/checks/node-is-in-sync", node_is_in_sync)
    router.add_get("/api/health/checks/node-is-quorum-critical", node_is_quorum_critical)
    router.add_get("/api/health/checks/alarms",
                   _alarm_check("There are alarms in effect in the cluster"))
    router.add_get("/api/health/checks/local-alarms",
                   _alarm_check("There are alarms in effect on the node"))
    router.add_get("/api/health/checks/port-listener/{port}", port_listener)
    router.add_get("/api/health/checks/virtual-hosts", virtual_hosts)
    router.add_get("/api/health/checks/dead-letter-archive", dead_letter_archive)
    router.add_get("/api/aliveness-test/{vhost}", aliveness_test)
    router.add_get("/api/nodes", list_nodes)
    router.add_get("/api/nodes/{name}", get_node)
