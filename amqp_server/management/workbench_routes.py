"""The dead-letter workbench over HTTP:

    GET  /api/dead-letter-queues[/{vhost}]                queues holding dead letters
    PUT  /api/queues/{vhost}/{name}/dead-letter-mark      mark (DELETE: unmark) a queue
    GET  /api/queues/{vhost}/{name}/messages              peek, filtered, paginated
                                                          (a stream: from an offset or
                                                          a timestamp, stream_browse.py)
    POST /api/queues/{vhost}/{name}/redrive               -> 202 {"task": id, ...}
    POST /api/queues/{vhost}/{name}/move
    POST /api/queues/{vhost}/{name}/delete-messages
    GET  /api/queues/{vhost}/{name}/archive               its archived dead letters, searched
    POST /api/queues/{vhost}/{name}/archive/redrive       -> 200 what was redriven
    GET  /api/tasks, GET /api/tasks/{id}, DELETE /api/tasks/{id} (stop it)

Permissions are those of the AMQP operations the actions amount to: read
on the queue to peek (basic.get), read on the queue and write on each
target exchange to redrive or move (consume, then publish), read to delete
(purge).  Moving to another broker is a shovel, which RabbitMQ lets
policymakers and administrators set up.  A task is visible to its user,
and to monitoring users and administrators.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from dlx.redrive import parse_filter, parse_time

from ..broker.permissions import CONFIGURE
from ..errors import NOT_FOUND, AMQPError
from ..remote_publisher import parse_uri
from . import archive_search, stream_browse, workbench
from .requests import (
    BROKER,
    USER_KEY,
    BadRequest,
    access_control,
    changing_vhost,
    grant_in,
    listed_vhosts,
    read_body,
    readable_queue,
)
from .tasks import DEFAULT_RATE, DELETE, MOVE, REDRIVE, LocalTarget, RemoteTarget, TaskRegistry

# A stream is browsed by offset and time and redriven by copies
# (stream_browse.py); moving and deleting from one are not built: refused,
# never ignored.
NOT_FOR_STREAMS = ("the workbench does not move or delete a stream's messages; browse it, "
                   "redrive copies of them, or read it with a consumer and x-stream-offset "
                   "(docs/streams.md)")


def _not_a_stream(queue) -> None:
    if queue.settings.is_stream:
        raise BadRequest(NOT_FOR_STREAMS)


def workbench_queue(request: web.Request):
    """`readable_queue`, but never a stream."""
    vhost, queue = readable_queue(request)
    _not_a_stream(queue)
    return vhost, queue


TASKS = web.AppKey("workbench_tasks", TaskRegistry)
MARKS = web.AppKey("workbench_marks", workbench.Marks)


def _number(value, name: str, default: int, lowest: int = 0, highest: int | None = None) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be an integer, got {value!r}") from None
    if number < lowest or (highest is not None and number > highest):
        top = f" and {highest}" if highest is not None else ""
        raise BadRequest(f"{name} must be between {lowest}{top}, got {number}")
    return number


def _filter(given: dict):
    try:
        return parse_filter(given)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


# ---- finding dead letters ---------------------------------------------------------

async def dead_letter_queues(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    vhosts = listed_vhosts(request)
    marks = request.app[MARKS]
    found = []
    for vhost in vhosts:
        targets = workbench.dead_letter_targets(vhost)
        for queue in vhost.queues.values():
            why = workbench.why_dead_letters(broker, vhost, queue, marks, targets)
            if why is not None:
                found.append(workbench.dead_letter_queue_json(queue, why))
    return web.json_response(found)


async def mark(request: web.Request) -> web.Response:
    vhost = changing_vhost(request)
    queue = vhost.queue(request.match_info["name"])
    grant_in(request, vhost).check(CONFIGURE, "queue", queue.name)
    request.app[MARKS].set(vhost.name, queue.name, request.method == "PUT")
    return web.Response(status=204)


async def messages(request: web.Request) -> web.Response:
    vhost, queue = readable_queue(request)
    query = dict(request.query)
    if queue.settings.is_stream:
        return _stream_page(vhost, queue, query)
    offset = _number(query.pop("offset", None), "offset", 0)
    limit = _number(query.pop("limit", None), "limit", workbench.PAGE_DEFAULT, 1,
                    workbench.PAGE_MAX)
    shown = _number(query.pop("truncate", None), "truncate", workbench.BODY_SHOWN)
    wanted = _filter(query)
    return web.json_response(workbench.page(request.app[BROKER], vhost, queue, wanted,
                                            offset, limit, shown))


# ---- the archive beside the queue --------------------------------------------------

def _archive(request: web.Request):
    archiver = request.app[BROKER].archiver
    if archiver is None:
        raise BadRequest("this broker keeps no archive (it has no data directory)")
    return archiver.files


async def archived_messages(request: web.Request) -> web.Response:
    vhost, queue = readable_queue(request)
    files = _archive(request)
    query = dict(request.query)
    offset = _number(query.pop("offset", None), "offset", 0)
    limit = _number(query.pop("limit", None), "limit", workbench.PAGE_DEFAULT, 1,
                    workbench.PAGE_MAX)
    shown = _number(query.pop("truncate", None), "truncate", workbench.BODY_SHOWN)
    wanted = _filter(query)
    found, redriven = await asyncio.get_running_loop().run_in_executor(
        None, archive_search.search, files, vhost.name, queue.name, wanted)
    return web.json_response(archive_search.page(files, vhost, queue.name, found, redriven,
                                                 offset, limit, shown))


async def redrive_archived(request: web.Request) -> web.Response:
    """Archived dead letters back to where they came from, now (at most
    REDRIVE_MAX a request): the rights of a redrive (read on the queue,
    write on each target exchange)."""
    vhost, queue = readable_queue(request)
    files = _archive(request)
    body = await read_body(request)
    loop = asyncio.get_running_loop()
    try:
        picked, missing = await loop.run_in_executor(
            None, archive_search.chosen, files, vhost.name, queue.name, body, _filter)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    target = LocalTarget(request.app[BROKER], vhost, grant_in(request, vhost), None, None)
    result = await archive_search.redrive(target, files, picked, time.time(), loop)
    await request.app[BROKER].archiver.ledger_changed()
    return web.json_response({**result, "missing": missing})


# ---- actions ----------------------------------------------------------------------

def _stream_page(vhost, queue, query: dict) -> web.Response:
    """A stream read from an offset (or a moment) on, nothing consumed."""
    offset = _number(query.pop("offset", None), "offset", 0)
    limit = _number(query.pop("limit", None), "limit", workbench.PAGE_DEFAULT, 1,
                    workbench.PAGE_MAX)
    shown = _number(query.pop("truncate", None), "truncate", workbench.BODY_SHOWN)
    moment = query.pop("timestamp", None)
    try:
        timestamp = parse_time(moment, "timestamp") if moment not in (None, "") else None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    wanted = _filter(query)
    return web.json_response(stream_browse.page(vhost, queue, wanted, offset, limit, shown,
                                                timestamp))


async def _stream_redrive(request: web.Request, vhost, queue, body: dict) -> web.Response:
    """Copies back to their origin, at once (at most stream_browse.SCAN_MAX
    read); the stream keeps them, marked as redriven.  By filter, the
    answer says where the read stopped (`next_offset`) and whether the
    stream goes on past it (`more`)."""
    filter_body = body.get("filter") or {}
    if not isinstance(filter_body, dict):
        raise BadRequest("filter must be an object")
    offsets = body.get("offsets")
    if offsets is not None and (not isinstance(offsets, list) or not all(
            isinstance(offset, int) and not isinstance(offset, bool) for offset in offsets)):
        raise BadRequest("offsets must be a list of stream offsets")
    if "seqs" in body:
        # A queue's redrive is a task over its seqs; a stream's is done at
        # once, by offsets (as the console's stream view sends them): not
        # mixed up.
        raise BadRequest("a stream is redriven by \"offsets\", a \"filter\" or "
                         "\"messages\", at once (no task)")
    start = body.get("offset", 0)
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise BadRequest("offset must be a stream offset (an integer, 0 or more)")
    if sum(key in body for key in ("offsets", "filter", "messages")) != 1:
        # Two would leave one unheeded (offsets are taken as named).
        raise BadRequest("name the messages: exactly one of \"offsets\", a \"filter\" or "
                         "\"messages\" (the audit's replay candidates)")
    if "messages" in body and not (isinstance(body["messages"], list) and all(
            isinstance(named, dict) and isinstance(named.get("body_sha256"), str)
            for named in body["messages"])):
        raise BadRequest("messages must be a list of message_id and body_sha256")
    wanted = _filter(filter_body)
    try:
        picked = stream_browse.chosen(queue, body, wanted)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    target = LocalTarget(request.app[BROKER], vhost, grant_in(request, vhost), None, None)
    result = await stream_browse.redrive(queue, target, picked.entries, body.get("again") is True)
    answer = {**result, "missing": picked.missing}
    if picked.next_offset is not None:
        # A read: where it stopped and whether the stream goes on.
        answer.update(next_offset=picked.next_offset, more=picked.more)
    if picked.found is not None:
        answer["found"] = picked.found
    return web.json_response(answer)


def _chosen(request: web.Request, queue, body: dict):
    """The seqs an action takes, in delivery order, and the replay
    candidates not found: exactly one of `seqs`, `filter` ({} for all) or
    `messages` ([{"message_id", "body_sha256"}])."""
    given = [key for key in ("seqs", "filter", "messages") if key in body]
    if len(given) != 1:
        raise BadRequest("say which messages: exactly one of seqs (a list), filter "
                         "(an object, {} for all) or messages (a list of message_id and "
                         "body_sha256)")
    broker = request.app[BROKER]
    if "seqs" in body:
        seqs = body["seqs"]
        if not isinstance(seqs, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) for s in seqs):
            raise BadRequest("seqs must be a list of integers")
        # Delivery order: the ready deque's own, no message looked into.
        order = {entry.seq: index for index, entry in enumerate(queue.ready)}
        return sorted(set(seqs), key=lambda s: order.get(s, len(order))), []
    if "filter" in body:
        if not isinstance(body["filter"], dict):
            raise BadRequest("filter must be an object")
        return workbench.seqs_by_filter(broker, queue, _filter(body["filter"])), []
    named = body["messages"]
    if not isinstance(named, list) or not all(
            isinstance(item, dict) and isinstance(item.get("body_sha256"), str)
            for item in named):
        raise BadRequest("messages must be a list of objects with body_sha256 "
                         "(and message_id)")
    keys = [(None if item.get("message_id") in (None, "") else str(item["message_id"]),
             item["body_sha256"].lower()) for item in named]
    return workbench.seqs_by_candidates(broker, queue, keys)


def _rate(body: dict) -> float:
    value = body.get("rate", DEFAULT_RATE)
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise BadRequest(f"rate must be a number of messages per second, got {value!r}") \
            from None
    if rate < 0:
        raise BadRequest("rate must be 0 (no limit) or more")
    return rate


def _started(request: web.Request, kind: str, vhost, queue, seqs, missing, rate, target,
             described) -> web.Response:
    task = request.app[TASKS].start(kind, vhost, queue, request[USER_KEY].name, seqs, rate,
                                    target, described, missing)
    return web.json_response({"task": task.id, "href": f"/api/tasks/{task.id}",
                              "total": len(seqs), "missing": missing}, status=202)


async def redrive(request: web.Request) -> web.Response:
    vhost, queue = readable_queue(request)
    body = await read_body(request)
    if queue.settings.is_stream:
        return await _stream_redrive(request, vhost, queue, body)
    seqs, missing = _chosen(request, queue, body)
    target = LocalTarget(request.app[BROKER], vhost, grant_in(request, vhost), None, None)
    return _started(request, REDRIVE, vhost, queue, seqs, missing, _rate(body), target,
                    {"to": "origin"})


async def move(request: web.Request) -> web.Response:
    vhost, queue = workbench_queue(request)
    body = await read_body(request)
    exchange = body.get("exchange")
    if not isinstance(exchange, str):
        raise BadRequest("exchange is mandatory (\"\" for the default exchange)")
    routing_key = body.get("routing_key")
    if routing_key is not None and not isinstance(routing_key, str):
        raise BadRequest("routing_key must be a string")
    exchange = "" if exchange == "amq.default" else exchange
    described = {"exchange": exchange, "routing_key": routing_key}
    uri = body.get("uri")
    if uri:
        access_control(request).require_policymaker(request[USER_KEY], vhost.name)
        try:
            parsed = parse_uri(str(uri))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        target = RemoteTarget(parsed, exchange, routing_key)
        described["uri"] = parsed.shown
    else:
        target = LocalTarget(request.app[BROKER], vhost, grant_in(request, vhost), exchange,
                             routing_key)
        try:
            target.check()  # 404 or 403 now, not in the task
        except AMQPError as exc:
            if exc.code != NOT_FOUND:
                raise
            # The queue is there: say which exchange is not, as RabbitMQ does.
            return web.json_response({"error": "Object Not Found", "reason": exc.reply_text},
                                     status=404)
    seqs, missing = _chosen(request, queue, body)
    return _started(request, MOVE, vhost, queue, seqs, missing, _rate(body), target,
                    described)


async def delete_messages(request: web.Request) -> web.Response:
    vhost, queue = workbench_queue(request)
    body = await read_body(request)
    seqs, missing = _chosen(request, queue, body)
    return _started(request, DELETE, vhost, queue, seqs, missing, _rate(body), None, {})


# ---- tasks ------------------------------------------------------------------------

def _visible_task(request: web.Request):
    task = request.app[TASKS].tasks[request.match_info["id"]]
    if not access_control(request).sees_owned(request[USER_KEY], task.user):
        raise KeyError(task.id)  # 404: other users' tasks are not disclosed
    return task


async def list_tasks(request: web.Request) -> web.Response:
    access = access_control(request)
    user = request[USER_KEY]
    return web.json_response([task.as_json() for task in request.app[TASKS].tasks.values()
                              if access.sees_owned(user, task.user)])


async def get_task(request: web.Request) -> web.Response:
    return web.json_response(_visible_task(request).as_json())


async def cancel_task(request: web.Request) -> web.Response:
    task = _visible_task(request)
    access_control(request).require_may_close(request[USER_KEY], task.user)
    request.app[TASKS].cancel(task)
    return web.Response(status=204)


def add_routes(app: web.Application, broker) -> None:
    registry = app[TASKS] = TaskRegistry(broker)
    app[MARKS] = workbench.marks_for(broker)

    async def stop_tasks(_app) -> None:
        await registry.stop()

    app.on_shutdown.append(stop_tasks)
    r = app.router
    r.add_get("/api/dead-letter-queues", dead_letter_queues)
    r.add_get("/api/dead-letter-queues/{vhost}", dead_letter_queues)
    r.add_put("/api/queues/{vhost}/{name}/dead-letter-mark", mark)
    r.add_delete("/api/queues/{vhost}/{name}/dead-letter-mark", mark)
    r.add_get("/api/queues/{vhost}/{name}/messages", messages)
    r.add_get("/api/queues/{vhost}/{name}/archive", archived_messages)
    r.add_post("/api/queues/{vhost}/{name}/archive/redrive", redrive_archived)
    r.add_post("/api/queues/{vhost}/{name}/redrive", redrive)
    r.add_post("/api/queues/{vhost}/{name}/move", move)
    r.add_post("/api/queues/{vhost}/{name}/delete-messages", delete_messages)
    r.add_get("/api/tasks", list_tasks)
    r.add_get("/api/tasks/{id}", get_task)
    r.add_delete("/api/tasks/{id}", cancel_task)
