"""What every handler of the HTTP API shares: the request keys, the 400
error, and reading a JSON body."""

from __future__ import annotations

import json

from aiohttp import web

# aiohttp >= 3.12 wants typed request keys; older ones take a string.
USER_KEY = web.RequestKey("user", object) if hasattr(web, "RequestKey") else "user"
BROKER = web.AppKey("broker", object)


class BadRequest(Exception):
    """Becomes 400 with this reason."""


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


ADMINISTRATOR = "administrator"
POLICYMAKER = "policymaker"


def forbidden(reason: str) -> web.HTTPForbidden:
    """RabbitMQ's 403 body."""
    return web.HTTPForbidden(text=json.dumps({"error": "not_authorised", "reason": reason}),
                             content_type="application/json")


def require_admin(request: web.Request) -> None:
    if ADMINISTRATOR not in request[USER_KEY].tags:
        raise forbidden("Not administrator user")
