"""Users, vhosts and permissions over HTTP, with RabbitMQ's paths and JSON
shapes (/api/users, /api/vhosts/{name}, /api/permissions/{vhost}/{user}).
Changing them needs the `administrator` tag, as in RabbitMQ; 401
{"error": "not_authorised"} otherwise."""

from __future__ import annotations

from aiohttp import web

from dlx.semantics import semantics_problem

from ..broker.permissions import Permission, PermissionError_
from ..broker.users import HASHING_ALGORITHM, User, hash_password
from .requests import BROKER, USER_KEY, BadRequest, read_body, require_admin


def _broker(request: web.Request):
    return request.app[BROKER]


def user_json(user: User) -> dict:
    return {"name": user.name, "password_hash": user.password_hash,
            "hashing_algorithm": HASHING_ALGORITHM, "tags": list(user.tags), "limits": {}}


def _tags(value) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(tag) for tag in value)
    return tuple(tag.strip() for tag in str(value or "").split(",") if tag.strip())


async def list_users(request: web.Request) -> web.Response:
    require_admin(request)
    return web.json_response([user_json(u) for u in _broker(request).users.values()])


async def get_user(request: web.Request) -> web.Response:
    require_admin(request)
    return web.json_response(user_json(_broker(request).users[request.match_info["name"]]))


async def put_user(request: web.Request) -> web.Response:
    """Create or update: `password` or `password_hash`, and `tags`."""
    require_admin(request)
    broker = _broker(request)
    name = request.match_info["name"]
    body = await read_body(request)
    existing = broker.users.get(name)
    if "password" in body:
        password_hash = hash_password(str(body["password"]))
    elif "password_hash" in body:
        password_hash = str(body["password_hash"])
    elif existing is not None:
        password_hash = existing.password_hash
    else:
        raise BadRequest("password or password_hash must be given")
    tags = _tags(body["tags"]) if "tags" in body else (existing.tags if existing else ())
    broker.put_user(User(name, password_hash, tags))
    return web.Response(status=204 if existing else 201)


async def delete_user(request: web.Request) -> web.Response:
    require_admin(request)
    _broker(request).delete_user(request.match_info["name"])
    return web.Response(status=204)


async def put_vhost(request: web.Request) -> web.Response:
    require_admin(request)
    broker = _broker(request)
    name = request.match_info["name"]
    # Ours, beside RabbitMQ's description and tags: whose semantics the
    # vhost follows (docs/choosing-semantics.md).
    semantics = (await read_body(request)).get("rabbitmq_semantics")
    if semantics is not None:
        problem = semantics_problem(semantics)
        if problem is not None:
            raise BadRequest(problem)
    try:
        existed = name in broker.vhosts
        broker.add_vhost(name, semantics)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if existed:
        return web.Response(status=204)
    # As RabbitMQ's API (rabbit_vhost:maybe_grant_full_permissions): whoever
    # creates a vhost may use it at once.
    broker.set_permission(request[USER_KEY].name, name, Permission())
    return web.Response(status=201)


async def delete_vhost(request: web.Request) -> web.Response:
    require_admin(request)
    _broker(request).delete_vhost(request.match_info["name"])
    return web.Response(status=204)


async def list_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = _broker(request)
    vhost = request.match_info.get("vhost")
    user = request.match_info.get("user")
    if vhost is not None:
        broker.vhosts[vhost]  # 404 for an unknown vhost
    if user is not None:
        broker.users[user]  # and for an unknown user
    return web.json_response([
        permission.as_json(u, v) for (u, v), permission in sorted(broker.permissions.items())
        if (vhost is None or v == vhost) and (user is None or u == user)])


async def get_permission(request: web.Request) -> web.Response:
    require_admin(request)
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    permission = _broker(request).permissions[(user, vhost)]
    return web.json_response(permission.as_json(user, vhost))


async def put_permission(request: web.Request) -> web.Response:
    require_admin(request)
    broker = _broker(request)
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    body = await read_body(request)
    missing = [key for key in ("configure", "write", "read") if key not in body]
    if missing:
        raise BadRequest(f"{', '.join(missing)} must be given")
    try:
        permission = Permission(str(body["configure"]), str(body["write"]), str(body["read"]))
    except PermissionError_ as exc:
        raise BadRequest(str(exc)) from None
    existed = (user, vhost) in broker.permissions
    broker.set_permission(user, vhost, permission)
    return web.Response(status=204 if existed else 201)


async def delete_permission(request: web.Request) -> web.Response:
    require_admin(request)
    _broker(request).clear_permission(request.match_info["user"], request.match_info["vhost"])
    return web.Response(status=204)


def add_routes(router) -> None:
    router.add_get("/api/users", list_users)
    router.add_get("/api/users/{name}", get_user)
    router.add_put("/api/users/{name}", put_user)
    router.add_delete("/api/users/{name}", delete_user)
    router.add_put("/api/vhosts/{name}", put_vhost)
    router.add_delete("/api/vhosts/{name}", delete_vhost)
    router.add_get("/api/permissions", list_permissions)
    router.add_get("/api/vhosts/{vhost}/permissions", list_permissions)
    router.add_get("/api/users/{user}/permissions", list_permissions)
    router.add_get("/api/permissions/{vhost}/{user}", get_permission)
    router.add_put("/api/permissions/{vhost}/{user}", put_permission)
    router.add_delete("/api/permissions/{vhost}/{user}", delete_permission)
