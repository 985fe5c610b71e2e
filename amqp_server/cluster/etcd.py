"""An asyncio client for etcd's v3 JSON gateway (etcd 3.4: `POST /v3/...`).

Why the gateway through aiohttp rather than a gRPC client: aiohttp is
already the broker's dependency (the management API), the gateway is part of
every etcd 3.4 server (Debian's `etcd-server` included), and the few calls
clustering needs (kv range/put/deleterange/txn, lease grant/revoke/keepalive/
watch, the election service's leader and resign) are plain JSON.  The maintained
asyncio client (aetcd) is built on grpcio, a large compiled dependency for
nothing the gateway lacks; and the care this module takes - failover across
members, which requests may be sent twice, members that are stopped rather
than dead - is what a thin gateway client would still leave to us.

What the gateway does to the wire format is kept inside this module: keys and
values travel base64-encoded, int64 fields as JSON strings, fields equal to
their proto3 default (0, false, empty) are left out, and errors come as
`{"error", "code", "message"}` (unary) or `{"error": {"grpc_code", ...}}` in
a stream.  Callers see `str` keys, `bytes` values, ints, and one exception
type, `EtcdError`, whose message is one line.

Several endpoints, one at a time.  A request goes to the endpoint that last
answered; when it cannot be reached the next one is tried, round after round
within the call's `timeout` (a round where no member could be connected to
ends the call: etcd is down).  A request that may be repeated gets at most
`attempt_timeout` on each member, so that a member that is stopped rather
than dead - it accepts the connection and never answers - or one that sits
on a request it took while etcd had no raft leader does not eat the whole
budget.  Whether a failed request may be sent again to another member depends
on the request:

- a request that certainly never reached etcd (the connection could not be
  made, or the member said "no leader" before proposing anything) is always
  tried on the next member;
- a read, a lease keepalive/grant/revoke and the election's
  resign/leader are safe to repeat (a read changes nothing; keepalive and
  revoke are idempotent; a second grant leaves an unused lease that expires
  by itself, and resign only deletes the key at its own create revision),
  so they are tried on the next member after a timeout or a dropped
  connection too;
- put, deleterange and txn are not repeated once they may have
  reached etcd: the first attempt may still be applied later (a member that
  was slow, not dead, can commit it after the retry) and reorder with what
  the caller does next, or a txn retried after it was applied sees its own
  write and reports failure.  They raise `EtcdError` with `outcome_unknown`
  set instead, and the caller, who knows what it wrote, reads back.  (The
  cluster code writes its shared keys with compare-and-swap on the key's
  mod revision, so a late duplicate can never apply.)  They travel on a
  fresh connection each, so that a connection the pool kept to a member that
  died meanwhile fails at connect time - certainly unsent - rather than after
  the request went out.

Every request carries the gateway header that sets gRPC metadata
`hasleader=true`: a member that has lost its raft leader answers "no leader"
at once (and cancels its watches) instead of waiting, and the client moves on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import socket
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import aiohttp

__all__ = [
    "Compare", "EtcdClient", "EtcdError", "Event", "KeyValue", "LeaderKey", "Range",
    "TxnResult", "delete_op", "prefix_end", "put_op", "range_op",
]

# etcd stops writes and linearizable reads for about one election timeout
# (2.5 s with the tests' flags) when its raft leader dies: a call waits that out.
DEFAULT_TIMEOUT = 5.0
DEFAULT_ATTEMPT_TIMEOUT = 1.0
RETRY_PAUSE = 0.1  # between two rounds over the members

# gRPC metadata through the gateway: a leaderless member refuses at once.
_HEADERS = {"Grpc-Metadata-hasleader": "true"}

# Refusals that come before anything is proposed: the next member may take it.
_NOT_APPLIED = ("etcdserver: no leader", "etcdserver: not capable",
                "etcdserver: too many requests", "etcdserver: server stopped")
# Refusals of a request that was proposed and may still commit.
_MAYBE_APPLIED = ("etcdserver: request timed out", "etcdserver: leader changed")

_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", ())

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network is unreachable",
    errno.EADDRNOTAVAIL: "address not available",
}


class EtcdError(Exception):
    """Anything that went wrong talking to etcd, in one line.

    `unreachable`: no member answered.  `outcome_unknown`: a write may or
    may not have been applied (see the module's docstring).  `code`: the gRPC
    status code etcd refused with.  `compact_revision`: set when a watch asked
    for a revision etcd has compacted away."""

    def __init__(self, message: str, *, code: int | None = None, unreachable: bool = False,
                 outcome_unknown: bool = False, compact_revision: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.unreachable = unreachable
        self.outcome_unknown = outcome_unknown
        self.compact_revision = compact_revision


# ---- data -----------------------------------------------------------------

def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")


def _b64(data: str | bytes) -> str:
    return base64.b64encode(_bytes(data)).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _key(text: str | None) -> str:
    return _unb64(text).decode("utf-8", "surrogateescape")


def prefix_end(prefix: str | bytes) -> bytes:
    """The range end that makes a range cover every key starting with
    `prefix` (etcd's clientv3.GetPrefixRangeEnd)."""
    data = bytearray(_bytes(prefix))
    for i in range(len(data) - 1, -1, -1):
        if data[i] < 0xFF:
            data[i] += 1
            return bytes(data[:i + 1])
    return b"\0"  # every key


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    def json(self) -> Any:
        return json.loads(self.value)

    @classmethod
    def _from(cls, data: dict[str, Any]) -> KeyValue:
        return cls(key=_key(data.get("key")), value=_unb64(data.get("value")),
                   create_revision=int(data.get("create_revision", 0)),
                   mod_revision=int(data.get("mod_revision", 0)),
                   version=int(data.get("version", 0)), lease=int(data.get("lease", 0)))


@dataclass(frozen=True)
class Range:
    kvs: list[KeyValue]
    revision: int  # the store's revision the range was read at
    count: int
    more: bool = False


@dataclass(frozen=True)
class Event:
    type: str  # "PUT" or "DELETE"
    kv: KeyValue
    prev_kv: KeyValue | None = None


@dataclass(frozen=True)
class LeaderKey:
    """The key an election campaign holds (etcd's v3electionpb.LeaderKey)."""

    name: str
    key: str
    revision: int  # the key's create revision
    lease: int

    def _body(self) -> dict[str, str]:
        return {"name": _b64(self.name), "key": _b64(self.key), "rev": str(self.revision),
                "lease": str(self.lease)}


@dataclass(frozen=True)
class Compare:
    """One condition of a txn: `target` of `key` compared by `result` with
    `value`.  Build them with the class methods."""

    key: str | bytes
    target: str   # VERSION, CREATE, MOD, VALUE, LEASE
    result: str   # EQUAL, GREATER, LESS, NOT_EQUAL
    value: int | bytes
    range_end: bytes | None = None

    @classmethod
    def create_revision(cls, key: str | bytes, revision: int, result: str = "EQUAL") -> Compare:
        """0 for a key that does not exist."""
        return cls(key, "CREATE", result, revision)

    @classmethod
    def mod_revision(cls, key: str | bytes, revision: int, result: str = "EQUAL") -> Compare:
        """0 for a key that does not exist."""
        return cls(key, "MOD", result, revision)

    @classmethod
    def version(cls, key: str | bytes, version: int, result: str = "EQUAL") -> Compare:
        return cls(key, "VERSION", result, version)

    @classmethod
    def value_is(cls, key: str | bytes, value: str | bytes, result: str = "EQUAL") -> Compare:
        return cls(key, "VALUE", result, _bytes(value))

    @classmethod
    def lease_is(cls, key: str | bytes, lease: int, result: str = "EQUAL") -> Compare:
        return cls(key, "LEASE", result, lease)

    def _body(self) -> dict[str, str]:
        field_name = {"VERSION": "version", "CREATE": "create_revision", "MOD": "mod_revision",
                      "VALUE": "value", "LEASE": "lease"}[self.target]
        value = _b64(self.value) if self.target == "VALUE" else str(self.value)
        body = {"key": _b64(self.key), "target": self.target, "result": self.result,
                field_name: value}
        if self.range_end is not None:
            body["range_end"] = _b64(self.range_end)
        return body


def _range_body(key: str | bytes, prefix: bool, limit: int = 0, keys_only: bool = False,
                revision: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key)}
    if prefix:
        body["range_end"] = _b64(prefix_end(key))
    if limit:
        body["limit"] = str(limit)
    if keys_only:
        body["keys_only"] = True
    if revision:
        body["revision"] = str(revision)
    return body


def put_op(key: str | bytes, value: str | bytes, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def delete_op(key: str | bytes, prefix: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key)}
    if prefix:
        body["range_end"] = _b64(prefix_end(key))
    return {"request_delete_range": body}


def range_op(key: str | bytes, prefix: bool = False) -> dict[str, Any]:
    return {"request_range": _range_body(key, prefix)}


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    # One entry per operation of the branch taken: the KeyValues a range read,
    # None for a put, the number of keys a delete removed.
    responses: list[list[KeyValue] | int | None] = field(default_factory=list)


def _txn_response(data: dict[str, Any]) -> list[KeyValue] | int | None:
    if "response_range" in data:
        return [KeyValue._from(kv) for kv in data["response_range"].get("kvs", [])]
    if "response_delete_range" in data:
        return int(data["response_delete_range"].get("deleted", 0))
    return None


def _revision(data: dict[str, Any]) -> int:
    return int(data.get("header", {}).get("revision", 0))


# ---- the client -----------------------------------------------------------

class _NotSent(Exception):
    """The request certainly did not reach etcd; `dead`: nothing that
    answers as etcd runs there (as opposed to a member without a leader)."""

    def __init__(self, reason: str, dead: bool = True) -> None:
        super().__init__(reason)
        self.dead = dead


class _MaybeSent(Exception):
    """The request may have reached etcd."""


def _normalize(endpoint: str) -> str:
    endpoint = endpoint.strip().rstrip("/")
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    return endpoint


def _reason(exc: BaseException, seconds: float) -> str:
    if isinstance(exc, _CONNECT_TIMEOUT):
        return f"could not connect within {seconds:.1f} s"
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError on 3.11
        return f"no answer within {seconds:.1f} s"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the connection was closed before an answer"
    os_error = getattr(exc, "os_error", None) or exc
    if isinstance(os_error, socket.gaierror):
        return "cannot resolve the host name"
    words = _ERRNO_WORDS.get(getattr(os_error, "errno", None) or -1)
    if words:
        return words
    return (str(exc) or type(exc).__name__).splitlines()[0]


class EtcdClient:
    """`endpoints`: the members' client URLs (`http://127.0.0.1:2379`, or
    `host:port`), a list or one comma-separated string.  Use `async with`
    or call `close()`."""

    def __init__(self, endpoints: str | Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
                 attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self.endpoints = [_normalize(e) for e in endpoints if e.strip()]
        if not self.endpoints:
            raise ValueError("no etcd endpoint given")
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self._current = 0
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()
        self._pooled = self._fresh = None

    @property
    def endpoint(self) -> str:
        """The endpoint the next request goes to first."""
        return self.endpoints[self._current]

    def _session(self, fresh: bool) -> aiohttp.ClientSession:
        if fresh:
            if self._fresh is None or self._fresh.closed:
                self._fresh = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(force_close=True, limit=0))
            return self._fresh
        if self._pooled is None or self._pooled.closed:
            self._pooled = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._pooled

    def _moved_past(self, index: int) -> None:
        if self._current == index:
            self._current = (index + 1) % len(self.endpoints)

    async def _post(self, endpoint: str, path: str, body: dict[str, Any], seconds: float,
                    fresh: bool) -> tuple[int, dict[str, Any]]:
        timeout = aiohttp.ClientTimeout(total=seconds,
                                        sock_connect=min(seconds, self.attempt_timeout))
        try:
            async with self._session(fresh).post(endpoint + path, json=body, headers=_HEADERS,
                                                 timeout=timeout) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientConnectorError, _CONNECT_TIMEOUT) as exc:
            raise _NotSent(_reason(exc, min(seconds, self.attempt_timeout))) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _MaybeSent(_reason(exc, seconds)) from None
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            # Not etcd's gateway (or not etcd at all): nothing was applied.
            raise _NotSent(f"answered HTTP {status} without etcd's JSON")
        return status, data

    @contextlib.asynccontextmanager
    async def _stream(self, endpoint: str, path: str, body: dict[str, Any]
                      ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A streaming request: its messages as they come, for as long as it
        lasts (no total timeout, only one to connect)."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.attempt_timeout)
        request = self._session(fresh=True).post(endpoint + path, json=body, headers=_HEADERS,
                                                 timeout=timeout)
        async with request as response, contextlib.aclosing(_messages(response)) as messages:
            yield messages

    async def _call(self, path: str, body: dict[str, Any], what: str, *, repeatable: bool,
                    timeout: float | None = None) -> dict[str, Any]:
        """POST `body` to `path` on the first member that answers.  `what`
        names the request in errors; `repeatable`: whether it may be sent
        again after it may have reached etcd.

        The members are tried in turn, round after round, until one answers
        or the time is up; a round in which no member could even be
        connected to ends it at once (nothing runs there).  A repeatable
        request gets `attempt_timeout` per member: a member that took a
        request while it had no raft leader may sit on it after the cluster
        elected one, when a new request to any member is answered at once.
        Any other request gets all the time left, as it is not sent twice."""
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        failures: dict[str, str] = {}
        count = len(self.endpoints)
        first = self._current
        attempt = 0
        dead_in_round = 0
        while True:
            if attempt and attempt % count == 0:  # a round over the members is over
                if dead_in_round == count:
                    break
                dead_in_round = 0
                await asyncio.sleep(max(0.0, min(RETRY_PAUSE, deadline - time.monotonic())))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            index = (first + attempt) % count
            endpoint = self.endpoints[index]
            attempt += 1
            seconds = min(remaining, self.attempt_timeout) if repeatable else remaining
            try:
                status, data = await self._post(endpoint, path, body, seconds,
                                                fresh=not repeatable)
            except _NotSent as exc:
                failures[endpoint] = str(exc)
                dead_in_round += exc.dead
                self._moved_past(index)
                continue
            except _MaybeSent as exc:
                self._moved_past(index)
                if not repeatable:
                    raise EtcdError(f"etcd at {endpoint} did not answer {what} ({exc}): it may "
                                    f"or may not have been applied",
                                    outcome_unknown=True) from None
                failures[endpoint] = str(exc)
                continue
            error = data.get("error")
            if error is not None or status != 200:
                message = str(data.get("message") or error or f"HTTP {status}")
                message = message.splitlines()[0] if message else f"HTTP {status}"
                code = data.get("code")
                if message.startswith(_NOT_APPLIED):
                    failures[endpoint] = message
                    self._moved_past(index)
                    continue
                if message.startswith(_MAYBE_APPLIED):
                    self._moved_past(index)
                    if repeatable:
                        failures[endpoint] = message
                        continue
                    raise EtcdError(f"etcd at {endpoint} could not finish {what} ({message}): "
                                    f"it may or may not have been applied",
                                    code=code, outcome_unknown=True)
                raise EtcdError(f"etcd at {endpoint} refused {what}: {message}", code=code)
            self._current = index
            return data
        raise EtcdError(_unreachable(list(failures.items()), budget), unreachable=True)

    # ---- kv ---------------------------------------------------------------

    async def get(self, key: str | bytes, *, prefix: bool = False, limit: int = 0,
                  keys_only: bool = False, revision: int = 0,
                  timeout: float | None = None) -> Range:
        """The key, or every key under the prefix (sorted by key)."""
        data = await self._call("/v3/kv/range",
                                _range_body(key, prefix, limit, keys_only, revision),
                                "a range read", repeatable=True, timeout=timeout)
        return Range([KeyValue._from(kv) for kv in data.get("kvs", [])], _revision(data),
                     int(data.get("count", 0)), bool(data.get("more", False)))

    async def get_one(self, key: str | bytes, *, timeout: float | None = None) -> KeyValue | None:
        found = await self.get(key, timeout=timeout)
        return found.kvs[0] if found.kvs else None

    async def put(self, key: str | bytes, value: str | bytes, *, lease: int = 0,
                  timeout: float | None = None) -> int:
        """The revision of the write."""
        data = await self._call("/v3/kv/put", put_op(key, value, lease)["request_put"],
                                "a put", repeatable=False, timeout=timeout)
        return _revision(data)

    async def delete(self, key: str | bytes, *, prefix: bool = False,
                     timeout: float | None = None) -> int:
        """How many keys were deleted."""
        data = await self._call("/v3/kv/deleterange",
                                delete_op(key, prefix)["request_delete_range"],
                                "a delete", repeatable=False, timeout=timeout)
        return int(data.get("deleted", 0))

    async def txn(self, compare: Iterable[Compare], success: Iterable[dict[str, Any]] = (),
                  failure: Iterable[dict[str, Any]] = (), *,
                  timeout: float | None = None) -> TxnResult:
        """If every comparison holds, the `success` operations, else the
        `failure` ones (built with put_op, delete_op, range_op), atomically."""
        body = {"compare": [c._body() for c in compare], "success": list(success),
                "failure": list(failure)}
        data = await self._call("/v3/kv/txn", body, "a txn", repeatable=False, timeout=timeout)
        return TxnResult(bool(data.get("succeeded", False)), _revision(data),
                         [_txn_response(r) for r in data.get("responses", [])])

    # ---- leases -----------------------------------------------------------

    async def grant(self, ttl: int, *, timeout: float | None = None) -> tuple[int, int]:
        """A new lease: (id, TTL).  etcd raises a TTL below its minimum
        (1.5 election timeouts, rounded up to whole seconds) to that minimum."""
        data = await self._call("/v3/lease/grant", {"TTL": str(int(ttl))}, "a lease grant",
                                repeatable=True, timeout=timeout)
        return int(data["ID"]), int(data.get("TTL", 0))

    async def revoke(self, lease: int, *, timeout: float | None = None) -> bool:
        """Revoke the lease and delete its keys; False when it did not exist
        (any more)."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)}, "a lease revoke",
                             repeatable=True, timeout=timeout)
        except EtcdError as exc:
            if "lease not found" in str(exc):
                return False
            raise
        return True

    async def keepalive(self, lease: int, *, timeout: float | None = None) -> int:
        """Renew the lease once; its TTL, 0 when it no longer exists."""
        data = await self._call("/v3/lease/keepalive", {"ID": str(lease)}, "a lease keepalive",
                                repeatable=True, timeout=timeout)
        return int(data.get("result", {}).get("TTL", 0))

    # ---- watch ------------------------------------------------------------

    async def watch(self, key: str | bytes, *, prefix: bool = False, start_revision: int = 0,
                    prev_kv: bool = False) -> AsyncIterator[list[Event]]:
        """The changes of the key (or prefix), one list per revision batch,
        from `start_revision` (0: from now) on.  A stream that breaks is
        opened again on the next member from the revision after the last one
        seen, so nothing is missed or repeated; `EtcdError` when no member
        could be reached for `timeout` seconds, or when the revision asked
        for has been compacted (`compact_revision`)."""
        next_revision = start_revision
        failing_since: float | None = None
        while True:
            index, endpoint = self._current, self.endpoint
            body: dict[str, Any] = {"create_request": {**_range_body(key, prefix),
                                                       "prev_kv": prev_kv}}
            if next_revision:
                body["create_request"]["start_revision"] = str(next_revision)
            problem = ""
            try:
                async with self._stream(endpoint, "/v3/watch", body) as messages:
                    async for message in messages:
                        if "error" in message:
                            error = message["error"]
                            problem = (error.get("message") if isinstance(error, dict)
                                       else str(error)) or "the stream failed"
                            break
                        result = message.get("result", {})
                        if result.get("canceled"):
                            compacted = int(result.get("compact_revision", 0))
                            if compacted:
                                raise EtcdError(
                                    f"etcd at {endpoint} cannot watch from revision "
                                    f"{next_revision}: compacted up to {compacted}",
                                    compact_revision=compacted)
                            problem = result.get("cancel_reason") or "the watch was canceled"
                            break
                        failing_since = None
                        self._current = index
                        if result.get("created") and not next_revision:
                            next_revision = _revision(result) + 1
                        events = [Event(e.get("type", "PUT"), KeyValue._from(e["kv"]),
                                        KeyValue._from(e["prev_kv"]) if "prev_kv" in e else None)
                                  for e in result.get("events", [])]
                        if events:
                            next_revision = max(e.kv.mod_revision for e in events) + 1
                            yield events
                    else:
                        problem = problem or "the stream ended"
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                problem = _reason(exc, self.attempt_timeout)
            self._moved_past(index)
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > self.timeout:
                raise EtcdError(f"etcd at {endpoint} cannot watch "
                                f"{_bytes(key).decode('utf-8', 'replace')!r}: {problem}",
                                unreachable=True)
            await asyncio.sleep(min(0.2, self.timeout / 10))

    async def watch_once(self, key: str | bytes, *, prefix: bool = False,
                         start_revision: int, timeout: float) -> list[Event]:
        """The first batch of changes from `start_revision` on, or [] when
        none came within `timeout` seconds or the watch could not be made.
        For loops that read a snapshot, decide, and wait for the next change
        (`start_revision` = the snapshot's revision + 1): a member that is
        stopped and keeps the stream open silently costs only `timeout`."""
        stream = self.watch(key, prefix=prefix, start_revision=start_revision)
        try:
            return await asyncio.wait_for(anext(stream), timeout)
        except (TimeoutError, EtcdError, StopAsyncIteration):
            return []
        finally:
            await stream.aclose()

    # ---- election service (v3electionpb through the gateway) --------------

    async def election_leader(self, name: str, *, timeout: float | None = None
                              ) -> KeyValue | None:
        """The key of the election's leader, None when nobody leads."""
        try:
            data = await self._call("/v3/election/leader", {"name": _b64(name)},
                                    "an election leader read", repeatable=True, timeout=timeout)
        except EtcdError as exc:
            if str(exc).endswith("election: no leader"):
                return None
            raise
        return KeyValue._from(data["kv"])

    async def election_resign(self, leader: LeaderKey, *, timeout: float | None = None) -> None:
        """Delete the leader key if it still has its create revision."""
        await self._call("/v3/election/resign", {"leader": leader._body()},
                         "an election resign", repeatable=True, timeout=timeout)



async def _messages(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a gateway stream, one per line.  Read in chunks
    and split here: aiohttp's readline refuses lines over 128 KiB, and a
    watch batch can be longer."""
    pending = b""
    async for chunk in response.content.iter_any():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _unreachable(failures: list[tuple[str, str]], budget: float) -> str:
    if not failures:
        return f"etcd was not tried: no time left of {budget:.1f} s"
    where = ", ".join(endpoint for endpoint, _ in failures)
    reasons = {reason for _, reason in failures}
    if len(reasons) == 1:
        return f"etcd at {where} is not reachable: {reasons.pop()}"
    return (f"etcd at {where} is not reachable: "
            + "; ".join(f"{endpoint}: {reason}" for endpoint, reason in failures))
