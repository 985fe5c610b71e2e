"""What every handler of the HTTP API shares: the request keys, the 400
error, reading a JSON body, asking the permission service, and who the
client is when a cluster member forwarded the request."""

from __future__ import annotations

import json

from aiohttp import web

from ..broker.permissions import READ
from ..cluster import forwarding

# aiohttp >= 3.12 wants typed request keys; older ones take a string.
USER_KEY = web.RequestKey("user", object) if hasattr(web, "RequestKey") else "user"
BROKER = web.AppKey("broker", object)


class BadRequest(Exception):
    """Becomes 400 with this reason: text, or a JSON value where RabbitMQ's
    reason is an Erlang term it renders as one (["not_integer", "x"])."""

    @property
    def reason(self):
        return self.args[0] if self.args else ""


async def read_body(request: web.Request) -> dict:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json(loads=json.loads)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"could not parse JSON document: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("JSON document must be an object")
    return body


def access_control(request: web.Request):
    """The broker's permission service (broker/access_control.py), which
    the AMQP channels ask too."""
    return request.app[BROKER].access


def require_admin(request: web.Request) -> None:
    access_control(request).require_admin(request[USER_KEY])


def visible_vhost(request: web.Request):
    """The vhost in the path, for a route that reads its objects."""
    name = request.match_info["vhost"]
    access_control(request).require_visible(request[USER_KEY], name)
    return request.app[BROKER].vhosts[name]


def changing_vhost(request: web.Request):
    """The vhost in the path, for a route that changes something in it."""
    name = request.match_info["vhost"]
    access_control(request).require_vhost(request[USER_KEY], name)
    return request.app[BROKER].vhosts[name]


def grant_in(request: web.Request, vhost):
    """The user's grant in `vhost`: the checks an AMQP channel would make."""
    return access_control(request).grant(request[USER_KEY], vhost.name)


def listed_vhosts(request: web.Request) -> list:
    """The vhosts a listing covers: the one in the path, or every vhost the
    user may see."""
    if "vhost" in request.match_info:
        return [visible_vhost(request)]
    names = access_control(request).visible_vhosts(request[USER_KEY])
    vhosts = request.app[BROKER].vhosts
    return [vhosts[name] for name in names]


def readable_queue(request: web.Request):
    """(vhost, queue) in the path, for reading its messages: basic.get's
    checks (read permission on the name, then 404, then exclusivity)."""
    vhost = changing_vhost(request)
    name = request.match_info["name"]
    grant_in(request, vhost).check(READ, "queue", name)
    queue = vhost.queue(name)
    vhost.check_exclusive_access(queue, None)
    return vhost, queue


def forwarded_by(request: web.Request, broker) -> tuple[str, int, str] | None:
    """For a request a cluster member forwarded (signed with the secret):
    (client host, client port, the member's node name)."""
    forwarded = request.headers.get(forwarding.HEADER)
    config = broker.config
    if forwarded and config.cluster_etcd:
        return forwarding.verify(config.cluster_secret.encode(), forwarded)
    return None


def client_host(request: web.Request, broker) -> str:
    """The client's address: the socket's peer, or the client a cluster
    member forwarded the request for."""
    forwarded = forwarded_by(request, broker)
    return forwarded[0] if forwarded is not None else request.remote or ""
