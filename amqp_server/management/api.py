"""The RabbitMQ management HTTP API paths that tools use, served by aiohttp
in the broker's own event loop (so handlers read and change broker state
directly, like a channel does).

Errors keep RabbitMQ's shapes: 401 {"error": "not_authorized"}, 404
{"error": "Object Not Found", "reason": "Not Found"}, 400 {"error":
"bad_request", "reason": ...}; rabbitmqadmin prints the reason.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import json

from aiohttp import web

from policies.model import PolicyError

from .. import __version__
from ..broker import definitions
from ..broker.access_control import NotAuthorised, check_not_default
from ..broker.permissions import CONFIGURE, READ
from ..errors import ACCESS_REFUSED, CONNECTION_FORCED, NOT_FOUND, AMQPError
from ..wire.table import FieldTable
from . import (
    bindings,
    console,
    health,
    listing,
    messages,
    metrics,
    rates,
    users,
    workbench_routes,
)
from .requests import (
    BROKER,
    USER_KEY,
    BadRequest,
    access_control,
    changing_vhost,
    client_host,
    grant_in,
    listed_vhosts as _vhosts,
    read_body as _body,
    readable_queue,
    require_admin,
    visible_vhost,
)
from .shapes import (
    NODE,
    channel_json,
    connection_json,
    consumer_details,
    consumer_json,
    exchange_json,
    queue_json,
)

# The sampler of message rates and queue depths (rates.py), one per app.
RATES = web.AppKey("rates", rates.Rates)


def _error(status: int, error: str, reason) -> web.Response:
    return web.json_response({"error": error, "reason": reason}, status=status)


def not_found() -> web.Response:
    return _error(404, "Object Not Found", "Not Found")


def not_authorised(reason: str) -> web.Response:
    """RabbitMQ answers a refusal by tags, vhost or permissions with 401
    (rabbit_mgmt_util:not_authorised), the AMQP reply text as the reason."""
    return _error(401, "not_authorised", reason)


@web.middleware
async def auth_and_errors(request: web.Request, handler):
    broker = request.app[BROKER]
    # The console's page and files are public: it logs in through the API.
    if request.path != "/metrics" and not console.is_public(request.path):
        user, refusal = _authenticate(request, broker)
        if user is None:
            if refusal is not None:
                return not_authorised(refusal)
            response = _error(401, "not_authorized", "Not_Authorized")
            response.headers["WWW-Authenticate"] = 'Basic realm="RabbitMQ Management"'
            return response
        request[USER_KEY] = user
    try:
        response = _with_columns(request, await handler(request))
        if broker.cluster is not None and request.method != "GET":
            # A clustered leader answers a change once every in-sync copy has it.
            try:
                await broker.cluster.settled()
            except TimeoutError:
                return _error(503, "service_unavailable",
                              "the change is not on enough copies yet (too few nodes in sync)")
        return response
    except web.HTTPException:
        raise
    except KeyError:
        return not_found()
    except NotAuthorised as exc:
        return not_authorised(str(exc))
    except BadRequest as exc:
        return _error(400, "bad_request", exc.reason)
    except listing.ListingError as exc:
        return _error(400, exc.error, exc.reason)
    except PolicyError as exc:
        return _error(400, "bad_request", str(exc))
    except AMQPError as exc:
        # What a channel would close with, as the management plugin's own
        # channel reports it (rabbit_mgmt_util:with_channel).
        if exc.code == NOT_FOUND:
            return not_found()
        if exc.code == ACCESS_REFUSED:
            return not_authorised(exc.reply_text)
        return _error(400, "bad_request", f"{exc.code} {exc.reply_text}")


def _authenticate(request: web.Request, broker):
    """(user, None) when the request may go on; (None, reason) for a known
    user that may not use the API; (None, None) for a failed login."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None, None
    try:
        username, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    user = broker.authenticate(username, password)
    if user is None:
        return None, None
    try:
        loopback = ipaddress.ip_address(client_host(request, broker)).is_loopback
    except ValueError:
        loopback = False
    if not broker.access.may_connect_from(user, loopback):
        return None, "User can only log in via localhost"
    if not broker.access.uses_management(user):
        return None, "Not management user"
    return user, None


def flag(body: dict, key: str, default: bool) -> bool:
    """rabbitmqadmin sends booleans as "true"/"false" strings."""
    value = body.get(key, default)
    if isinstance(value, str):
        if value.lower() not in ("true", "false"):
            raise BadRequest(f"{key} must be true or false, got {value!r}")
        return value.lower() == "true"
    return bool(value)


def integer(body: dict, key: str, default: int) -> int:
    value = body.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{key} must be an integer, got {value!r}") from None


def table(value) -> FieldTable:
    if value in (None, ""):
        return FieldTable()
    if not isinstance(value, dict):
        raise BadRequest("arguments must be a JSON object")
    return FieldTable(value)


def _listing(request: web.Request, items: list[dict], pages: bool = False) -> web.Response:
    """?sort= and ?sort_reverse= as the management API honours them; with
    `pages` (the listings RabbitMQ pages) its default order and ?page=,
    ?page_size=, ?name=, ?use_regex= too.  (?columns= applies to every
    answer: auth_and_errors.)"""
    query = request.query
    page = listing.page_asked(query) if pages else None
    items = listing.sorted_items(items, query.get("sort"), query.get("sort_reverse") == "true",
                                 listing.DEFAULT_SORT if pages else ())
    return web.json_response(listing.paged(items, page) if page is not None else items)


def _with_columns(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """?columns= on a JSON answer: only the named keys (within a page's
    items when a page was asked), as rabbit_mgmt_util:reply/3 does."""
    columns = listing.columns_asked(request.query)
    if (columns is None or request.method != "GET" or not isinstance(response, web.Response)
            or response.status != 200 or response.content_type != "application/json"
            or not isinstance(response.body, bytes)):
        return response
    body = json.loads(response.body)
    if "page" in request.query and not isinstance(body, list):
        # With a page asked, a page narrows its items and one object is
        # left as it is (rabbit_mgmt_util:maybe_pagination/3).
        if not (isinstance(body, dict) and "page_count" in body):
            return response
        body["items"] = listing.with_columns(body["items"], columns)
    else:
        body = listing.with_columns(body, columns)
    return web.json_response(body)


def _own(request: web.Request, connection) -> bool:
    """Connections, channels and consumers the user may see."""
    return access_control(request).sees_owned(request[USER_KEY], _owner(connection))


def _connections(request: web.Request) -> list:
    return [c for c in request.app[BROKER].connections if _own(request, c)]


# ---- overview, vhosts, whoami -----------------------------------------------

async def overview(request: web.Request) -> web.Response:
    """Totals over the vhosts the user may see; listeners for monitors.
    Message rates and queue depths as RabbitMQ gives them (rates.py): the
    broker's own for monitors, the user's vhosts' for anyone else."""
    wanted = _ranges(request)
    vhosts = _vhosts(request)
    queues = [q for v in vhosts for q in v.queues.values()]
    conns = _connections(request)
    monitor = access_control(request).is_monitor(request[USER_KEY])
    config = request.app[BROKER].config
    answer = {
        "management_version": "3.13.0", "rabbitmq_version": "3.13.0",
        "product_name": "amqp-server", "product_version": __version__,
        # A cluster's name and this node's, as RabbitMQ's overview names them.
        **({"cluster_name": config.cluster_name, "node": config.node_name}
           if request.app[BROKER].cluster is not None
           else {"cluster_name": NODE, "node": NODE}),
        "rates_mode": "basic",
        "sample_retention_policies": {
            "global": [rates.OVERVIEW_SAMPLES * int(rates.INTERVAL)],
            "basic": [rates.QUEUE_SAMPLES * int(rates.INTERVAL)], "detailed": []},
        "object_totals": {
            "connections": len(conns),
            "channels": sum(len(c.channels) for c in conns),
            "exchanges": sum(len(v.exchanges) for v in vhosts),
            "queues": len(queues),
            "consumers": sum(len(q.consumers) for q in queues)},
        **request.app[RATES].overview([v.name for v in vhosts], monitor, wanted),
        # Resource alarms block every publisher: anyone may know they are on.
        "alarms": sorted(request.app[BROKER].alarms),
        # The queues whose dead-letter alerts fire (dlx/alerts.py), in the
        # vhosts the user may see.
        "dead_letter_alerts": [
            alert for alert in request.app[BROKER].dead_letter_watch.alerts()
            if alert["vhost"] in {v.name for v in vhosts}],
        # Retention's archive, and why it takes no records, if it does not.
        "dead_letter_archive": health.archive_status(request.app[BROKER]),
    }
    if monitor:
        answer["listeners"] = [{"node": NODE, **listener}
                               for listener in health.listeners(request)]
    return web.json_response(answer)


def _ranges(request: web.Request) -> dict:
    try:
        return rates.ranges(request.query)
    except rates.InvalidRange as exc:
        raise BadRequest(str(exc)) from None



async def whoami(request: web.Request) -> web.Response:
    user = request[USER_KEY]
    return web.json_response({"name": user.name, "tags": list(user.tags)})


async def list_vhosts(request: web.Request) -> web.Response:
    return _listing(request, [_vhost_json(v) for v in _vhosts(request)], pages=True)


async def get_vhost(request: web.Request) -> web.Response:
    require_admin(request)  # as RabbitMQ's /api/vhosts/{name}
    return web.json_response(_vhost_json(request.app[BROKER].vhosts[request.match_info["name"]]))


def _vhost_json(vhost) -> dict:
    ready = sum(q.message_count for q in vhost.queues.values())
    unacked = sum(q.unacked for q in vhost.queues.values())
    # rabbitmq_semantics is ours: whose rules the vhost follows, chosen in
    # its metadata or the broker's (docs/choosing-semantics.md).
    return {"name": vhost.name, "tracing": False, "messages": ready + unacked,
            "messages_ready": ready, "messages_unacknowledged": unacked,
            "metadata": vhost.metadata, "rabbitmq_semantics": vhost.semantics}


# ---- queues -------------------------------------------------------------------

async def list_queues(request: web.Request) -> web.Response:
    try:
        wanted = rates.ranges(request.query)
    except rates.InvalidRange as exc:
        # RabbitMQ's listings name the error so (its object pages and the
        # overview answer "bad_request").
        return _error(400, "invalid_range_parameters", str(exc))
    sampled = request.app[RATES]
    return _listing(request, [rates.merge(queue_json(q), sampled.queue(q, wanted))
                              for v in _vhosts(request) for q in v.queues.values()],
                    pages=True)


async def get_queue(request: web.Request) -> web.Response:
    queue = visible_vhost(request).queue(request.match_info["name"])  # 404 first
    shown = rates.merge(queue_json(queue), request.app[RATES].queue(queue, _ranges(request)))
    # Frameworks count a queue's consumers, and find their connections, here.
    shown["consumer_details"] = consumer_details(queue)
    return web.json_response(shown)


async def put_queue(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    name = request.match_info["name"]
    body = await _body(request)
    arguments = table(body.get("arguments"))
    existed = name in vhost.queues
    grant_in(request, vhost).check_queue_declare(name, arguments, existed)
    vhost.declare_queue(name, None, durable=flag(body, "durable", True),
                        auto_delete=flag(body, "auto_delete", False), arguments=arguments)
    return web.Response(status=204 if existed else 201)


def _queue_to_act_on(request: web.Request, kind: str):
    """The queue in the path (404 first, as RabbitMQ), after the checks the
    AMQP method would make."""
    vhost = changing_vhost(request)
    queue = vhost.queue(request.match_info["name"])
    grant_in(request, vhost).check(kind, "queue", queue.name)
    vhost.check_exclusive_access(queue, None)
    return vhost, queue


async def delete_queue(request: web.Request) -> web.Response:
    vhost, queue = _queue_to_act_on(request, CONFIGURE)
    vhost.delete_queue(queue, request.query.get("if-unused") == "true",
                       request.query.get("if-empty") == "true")
    return web.Response(status=204)


async def purge_queue(request: web.Request) -> web.Response:
    _queue_to_act_on(request, READ)[1].purge()
    return web.Response(status=204)


async def get_messages(request: web.Request) -> web.Response:
    """basic.get over HTTP.  As RabbitMQ's: the request's keys are checked
    before the queue (a 400 comes before a 404), and ackmode has no default,
    so a client sending the old `requeue` key instead is refused rather
    than having its messages silently put back."""
    access_control(request).require_vhost(request[USER_KEY], request.match_info["vhost"])
    count, ackmode, encoding, truncate = messages.get_request(await _body(request))
    try:
        _vhost, queue = readable_queue(request)
    except AMQPError as exc:
        if exc.code != NOT_FOUND:
            raise
        # What its channel's basic.get closed with (rabbit_mgmt_wm_queue_get).
        return _error(404, "not_found", exc.reply_text)
    try:
        got = messages.get(queue, count, ackmode, encoding, truncate)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return web.json_response(got)


# ---- exchanges and bindings ---------------------------------------------------

async def list_exchanges(request: web.Request) -> web.Response:
    return _listing(request, [exchange_json(x) for v in _vhosts(request)
                              for x in v.exchanges.values()], pages=True)


def _exchange_name(request: web.Request, key: str = "name") -> str:
    name = request.match_info[key]
    return "" if name == "amq.default" else name


async def get_exchange(request: web.Request) -> web.Response:
    return web.json_response(exchange_json(visible_vhost(request).exchange(
        _exchange_name(request))))


async def put_exchange(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    name = _exchange_name(request)
    body = await _body(request)
    arguments = table(body.get("arguments"))
    existed = name in vhost.exchanges
    grant_in(request, vhost).check_exchange_declare(name, arguments, existed)
    vhost.declare_exchange(name, str(body.get("type", "")), False,
                           flag(body, "durable", True), flag(body, "auto_delete", False),
                           flag(body, "internal", False), arguments)
    return web.Response(status=204 if existed else 201)


async def delete_exchange(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    name = _exchange_name(request)
    vhost.exchange(name)
    grant_in(request, vhost).check(CONFIGURE, "exchange", name)
    vhost.delete_exchange(name, request.query.get("if-unused") == "true")
    return web.Response(status=204)


async def publish(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    exchange = vhost.exchange(_exchange_name(request))
    body = await _body(request)
    grant = grant_in(request, vhost)
    try:
        routed = messages.publish(grant, vhost, exchange, body)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    except AMQPError as exc:
        # RabbitMQ's publish route reports whatever closed its channel,
        # a 403 included, as 400 "403 ACCESS_REFUSED - ...".
        raise BadRequest(f"{exc.code} {exc.reply_text}") from None
    return web.json_response({"routed": routed})


def _bindings_vhost(request: web.Request):
    """The vhost of a binding listing, or None: RabbitMQ lists nothing for a
    vhost that does not exist, rather than answering 404."""
    try:
        return visible_vhost(request)
    except KeyError:
        return None


def _bindings_listing(request: web.Request, listed) -> web.Response:
    """`listed(vhost)` of the vhost in the path, in RabbitMQ's order."""
    vhost = _bindings_vhost(request)
    return _listing(request, listed(vhost) if vhost is not None else [])


async def list_bindings(request: web.Request) -> web.Response:
    return _listing(request, bindings.in_order(
        [b for v in _vhosts(request) for b in bindings.of_vhost(v)]))


async def queue_bindings(request: web.Request) -> web.Response:
    return _bindings_listing(request, lambda v: bindings.of_queue(v, request.match_info["name"]))


async def exchange_source_bindings(request: web.Request) -> web.Response:
    return _bindings_listing(request,
                             lambda v: bindings.from_exchange(v, _exchange_name(request)))


async def exchange_destination_bindings(request: web.Request) -> web.Response:
    return _bindings_listing(request,
                             lambda v: bindings.to_exchange(v, _exchange_name(request)))


async def bindings_between(request: web.Request) -> web.Response:
    kind = request.match_info["kind"]
    if kind not in ("q", "e"):
        raise KeyError(kind)
    destination = (request.match_info["destination"] if kind == "q"
                   else _exchange_name(request, "destination"))
    return _bindings_listing(request, lambda v: bindings.between(
        v, _exchange_name(request, "source"), "queue" if kind == "q" else "exchange",
        destination))


def _binding_ends(vhost, request: web.Request):
    source = vhost.exchange(_exchange_name(request, "source"))
    kind = request.match_info["kind"]
    if kind == "q":
        destination = vhost.queue(request.match_info["destination"])
    elif kind == "e":
        destination = vhost.exchange(_exchange_name(request, "destination"))
    else:
        raise KeyError(kind)
    return source, destination


def _check_binding_change(request: web.Request, vhost, source, destination) -> None:
    """queue.bind's checks: not the default exchange, write on the
    destination, read on the source, and nobody else's exclusive queue."""
    check_not_default(source.name, destination.name)
    grant_in(request, vhost).check_binding("queue" if destination.is_queue else "exchange",
                                          destination.name, source.name)
    if destination.is_queue:
        vhost.check_exclusive_access(destination, None)


async def add_binding(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    source, destination = _binding_ends(vhost, request)  # 404 first, as RabbitMQ
    _check_binding_change(request, vhost, source, destination)
    body = await _body(request)
    vhost.bind(source.name, destination, str(body.get("routing_key", "")),
               table(body.get("arguments")))
    return web.Response(status=201)


async def delete_binding(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    source, destination = _binding_ends(vhost, request)
    binding = bindings.named(source, destination, request.match_info["props"])
    if binding is None:
        return not_found()
    _check_binding_change(request, vhost, source, destination)
    vhost.unbind(source.name, destination, binding.routing_key, binding.arguments)
    return web.Response(status=204)


# ---- policies -----------------------------------------------------------------

def _policy_routes(operator: bool):
    def may_change(request: web.Request) -> None:
        # RabbitMQ: a policy needs policymaker (or administrator) with
        # access to the vhost; an operator policy needs administrator.
        if operator:
            require_admin(request)
        else:
            access_control(request).require_policymaker(request[USER_KEY],
                                                        request.match_info["vhost"])

    async def listing(request: web.Request) -> web.Response:
        store = request.app[BROKER].policies
        names = [v.name for v in _vhosts(request)]
        return _listing(request, [p.as_json() for name in names
                                  for p in store.in_vhost(name, operator)])

    async def get(request: web.Request) -> web.Response:
        may_change(request)
        store = request.app[BROKER].policies
        policy = store.table(operator)[(request.match_info["vhost"], request.match_info["name"])]
        return web.json_response(policy.as_json())

    async def put(request: web.Request) -> web.Response:
        may_change(request)
        broker = request.app[BROKER]
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        body = await _body(request)
        if "pattern" not in body or "definition" not in body:
            raise BadRequest("Validation failed\n\npattern and definition are mandatory\n")
        existed = (vhost, name) in broker.policies.table(operator)
        try:
            broker.set_policy(vhost, name, body["pattern"], body["definition"],
                              integer(body, "priority", 0), body.get("apply-to") or "all",
                              operator)
        except PolicyError as exc:
            raise BadRequest(f"Validation failed\n\n{exc}\n") from None
        return web.Response(status=204 if existed else 201)

    async def delete(request: web.Request) -> web.Response:
        may_change(request)
        request.app[BROKER].clear_policy(request.match_info["vhost"],
                                         request.match_info["name"], operator)
        return web.Response(status=204)

    return listing, get, put, delete


# ---- connections, channels, consumers ----------------------------------------

async def list_connections(request: web.Request) -> web.Response:
    return _listing(request, [connection_json(c) for c in _connections(request)],
                    pages=True)


async def get_connection(request: web.Request) -> web.Response:
    conn = _connection(request)
    access_control(request).require_sees_owned(request[USER_KEY], _owner(conn))
    return web.json_response(connection_json(conn))


async def close_connection(request: web.Request) -> web.Response:
    conn = _connection(request)
    access_control(request).require_may_close(request[USER_KEY], _owner(conn))
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    conn.shutdown(CONNECTION_FORCED, reason)  # the error adds "CONNECTION_FORCED - "
    return web.Response(status=204)


def _owner(conn) -> str | None:
    return conn.user.name if conn.user is not None else None


def _connection(request: web.Request):
    name = request.match_info["name"]
    for conn in request.app[BROKER].connections:
        if conn.name == name:
            return conn
    raise KeyError(name)


async def list_channels(request: web.Request) -> web.Response:
    return _listing(request, [channel_json(c, ch) for c in _connections(request)
                              for ch in c.channels.values()], pages=True)


async def list_consumers(request: web.Request) -> web.Response:
    wanted = {v.name for v in _vhosts(request)}
    return _listing(request, [
        consumer_json(c, ch, consumer) for c in _connections(request)
        for ch in c.channels.values() for consumer in ch.consumers.values()
        if consumer.queue.vhost in wanted])


# ---- definitions --------------------------------------------------------------

async def export_definitions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = request.app[BROKER]
    return web.json_response(definitions.export(broker, request.match_info.get("vhost")))


async def import_definitions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = request.app[BROKER]
    body = await _body(request)
    try:
        definitions.import_(broker, body, request.match_info.get("vhost"))
    except KeyError as exc:
        raise BadRequest(f"definitions: missing field {exc}") from None
    except (ValueError, TypeError) as exc:
        raise BadRequest(str(exc)) from None
    return web.Response(status=204)


async def prometheus(request: web.Request) -> web.Response:
    return web.Response(text=metrics.render(request.app[BROKER]),
                        content_type="text/plain", charset="utf-8")


def make_app(broker, listeners=None) -> web.Application:
    """`listeners`: () -> the server's active listeners, for the health
    checks and the overview (by default the AMQP port of the config)."""
    app = web.Application(middlewares=[auth_and_errors])
    app[BROKER] = broker
    # The sampler behind every rate runs while the app does.
    app[RATES] = sampler = rates.Rates(broker)

    async def start_sampling(_app: web.Application) -> None:
        sampler.start(asyncio.get_running_loop())

    async def stop_sampling(_app: web.Application) -> None:
        sampler.stop()
    app.on_startup.append(start_sampling)
    app.on_cleanup.append(stop_sampling)
    app[health.LISTENERS] = listeners or (lambda: [{"protocol": "amqp",
                                                    "port": broker.config.port}])
    r = app.router
    r.add_get("/api/overview", overview)
    r.add_get("/api/whoami", whoami)
    r.add_get("/api/vhosts", list_vhosts)
    r.add_get("/api/vhosts/{name}", get_vhost)
    r.add_get("/api/queues", list_queues)
    r.add_get("/api/queues/{vhost}", list_queues)
    r.add_get("/api/queues/{vhost}/{name}", get_queue)
    r.add_put("/api/queues/{vhost}/{name}", put_queue)
    r.add_delete("/api/queues/{vhost}/{name}", delete_queue)
    r.add_delete("/api/queues/{vhost}/{name}/contents", purge_queue)
    r.add_post("/api/queues/{vhost}/{name}/get", get_messages)
    r.add_get("/api/queues/{vhost}/{name}/bindings", queue_bindings)
    r.add_get("/api/exchanges", list_exchanges)
    r.add_get("/api/exchanges/{vhost}", list_exchanges)
    r.add_get("/api/exchanges/{vhost}/{name}", get_exchange)
    r.add_put("/api/exchanges/{vhost}/{name}", put_exchange)
    r.add_delete("/api/exchanges/{vhost}/{name}", delete_exchange)
    r.add_post("/api/exchanges/{vhost}/{name}/publish", publish)
    r.add_get("/api/exchanges/{vhost}/{name}/bindings/source", exchange_source_bindings)
    r.add_get("/api/exchanges/{vhost}/{name}/bindings/destination",
              exchange_destination_bindings)
    r.add_get("/api/bindings", list_bindings)
    r.add_get("/api/bindings/{vhost}", list_bindings)
    r.add_get("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", bindings_between)
    r.add_post("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", add_binding)
    r.add_delete("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
                 delete_binding)
    for prefix, operator in (("/api/policies", False), ("/api/operator-policies", True)):
        listing, get, put, delete = _policy_routes(operator)
        r.add_get(prefix, listing)
        r.add_get(prefix + "/{vhost}", listing)
        r.add_get(prefix + "/{vhost}/{name}", get)
        r.add_put(prefix + "/{vhost}/{name}", put)
        r.add_delete(prefix + "/{vhost}/{name}", delete)
    r.add_get("/api/connections", list_connections)
    r.add_get("/api/connections/{name}", get_connection)
    r.add_delete("/api/connections/{name}", close_connection)
    r.add_get("/api/channels", list_channels)
    r.add_get("/api/consumers", list_consumers)
    r.add_get("/api/consumers/{vhost}", list_consumers)
    r.add_get("/api/definitions", export_definitions)
    r.add_get("/api/definitions/{vhost}", export_definitions)
    r.add_post("/api/definitions", import_definitions)
    r.add_post("/api/definitions/{vhost}", import_definitions)
    r.add_get("/metrics", prometheus)
    users.add_routes(r)
    health.add_routes(r)
    # The dead-letter workbench's API and the web console (its own modules).
    workbench_routes.add_routes(app, broker)
    console.add_routes(app)
    return app


class ManagementServer:
    def __init__(self, broker, host: str, port: int, listeners=None) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.listeners = listeners
        self._runner: web.AppRunner | None = None

    def make_app(self) -> web.Application:
        return make_app(self.broker, self.listeners)

    @property
    def rates(self) -> rates.Rates | None:
        """The app's sampler, while it runs."""
        return self._runner.app.get(RATES) if self._runner is not None else None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
