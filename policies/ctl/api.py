"""amqpctl's HTTP client for the broker's management API, and what its
answers mean as amqpctl errors.

Before a verb runs, `ensure_amqp_server` asks /api/overview who answers:
RabbitMQ's management API has the same paths, so with the default port
taken by a RabbitMQ, amqpctl would otherwise manage that RabbitMQ quietly.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from .output import EX_DATAERR, EX_NOPERM, EX_UNAVAILABLE, CtlError

PRODUCT = "amqp-server"
PORT_HINT = ("point amqpctl at amqp-server's management port with --port PORT or "
             "AMQPCTL_PORT (and --host or AMQPCTL_HOST for another machine)")


class Api:
    def __init__(self, host: str, port: int, username: str, password: str) -> None:
        self.root = f"http://{host}:{port}"
        self.base = f"{self.root}/api"
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}"}
        self._overview: dict[str, Any] | None = None

    def call(self, method: str, path: str, body: object = None,
             headers: dict[str, str] | None = None, missing: CtlError | None = None) -> Any:
        """The decoded JSON answer.  `missing`: what a bare 404 (the API's
        "Not Found") means for this call, raised instead of "not found"."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, **(headers or {})}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw: bytes = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code == 404 and not _is_json(raw):
                # The management API's 404s are JSON; another server's are not.
                raise self._not_management("it has no such API (a 404 without JSON)") from None
            error = _http_error(exc, raw)
            if missing is not None and str(error) == "not found":
                raise missing from None
            error.path = path
            raise error from None
        except (http.client.HTTPException, ConnectionResetError) as exc:
            # Something listens there but does not speak HTTP: most often
            # --port names the AMQP port, which answers with its protocol header.
            why = ("it speaks AMQP, not HTTP: that is the AMQP port" if "AMQP" in str(exc)
                   else f"it does not answer HTTP ({exc!r})")
            raise self._not_management(why) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(f"unable to reach the management API at {self.base}: {reason}",
                           EX_UNAVAILABLE) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise self._not_management("it answers something other than JSON") from None

    def overview(self) -> dict[str, Any]:
        if self._overview is None:
            try:
                answer = self.call("GET", "/overview")
            except CtlError as exc:
                # Every management API has /api/overview: a JSON 404 there
                # is another server's (RabbitMQ's Prometheus plugin answers
                # any path so), not a missing virtual host.
                if str(exc) != "not found":
                    raise
                raise self._not_management("it has no /api/overview") from None
            if not isinstance(answer, dict):
                raise self._not_management("its /api/overview is not an object")
            self._overview = answer
        return self._overview

    def ensure_amqp_server(self) -> None:
        """Refuse to go on when the API that answers is another product's."""
        overview = self.overview()
        product = overview.get("product_name")
        if product == PRODUCT:
            return
        if product is None:
            who = f"names no product (no product_name in /api/overview), so it is not {PRODUCT}'s"
        else:
            version = overview.get("product_version")
            who = f"is {product}{f' {version}' if version else ''}'s, not {PRODUCT}'s"
        raise CtlError(f"the management API at {self.base} {who}: amqpctl manages {PRODUCT} "
                       f"only; {PORT_HINT}", EX_UNAVAILABLE)

    def _not_management(self, why: str) -> CtlError:
        return CtlError(f"{self.base} is not a management API: {why}{self._exporter()}; "
                        "--port must name the management port (15672 by default)",
                        EX_UNAVAILABLE)

    def _exporter(self) -> str:
        """", and it serves Prometheus metrics: ..." when the address reached
        answers /metrics in Prometheus's text format (15692, the Prometheus
        port, is one digit away from 15672), else nothing."""
        try:
            with urllib.request.urlopen(self.root + "/metrics", timeout=5) as response:
                head = response.read(65536).decode("utf-8", "replace")
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
            return ""
        if "# TYPE " not in head:
            return ""
        return ", and it serves Prometheus metrics at /metrics: that is a Prometheus port"


# A verb: what it does with the API and the parsed command line.
Verb = Callable[[Api, argparse.Namespace], None]
# How a verb module registers a verb: (name, verb, help) -> its sub-parser.
AddVerb = Callable[[str, Verb, str], argparse.ArgumentParser]


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


def _http_error(exc: urllib.error.HTTPError, raw: bytes) -> CtlError:
    try:
        body = json.loads(raw)
        error, reason = body.get("error"), body.get("reason", exc.reason)
    except (ValueError, AttributeError):
        error, reason = None, exc.reason
    if exc.code == 401 and error == "not_authorised":
        # Logged in, but its tags or permissions do not allow this.
        return CtlError(f"access refused: {reason}", EX_NOPERM)
    if exc.code == 401:
        return CtlError("access refused: wrong username or password", EX_NOPERM)
    if exc.code == 404:
        # A reason of its own (which exchange is missing, say) is told as
        # given; the bare "Not Found" is named by the caller.
        if isinstance(reason, str) and reason.startswith("NOT_FOUND - "):
            return CtlError(reason, EX_DATAERR)
        return CtlError("not found", EX_DATAERR)
    if exc.code == 403:
        return CtlError(f"access refused: {reason}", EX_NOPERM)
    return CtlError(str(reason).strip().replace("Validation failed\n\n", ""), EX_DATAERR)


def vhost_path(vhost: str) -> str:
    return quote(vhost, safe="")


def queue_path(vhost: str, queue: str) -> str:
    return f"/queues/{vhost_path(vhost)}/{quote(queue, safe='')}"


def exchange_path(vhost: str, exchange: str) -> str:
    return f"/exchanges/{vhost_path(vhost)}/{quote(exchange, safe='')}"


def exists(api: Api, path: str) -> bool:
    try:
        api.call("GET", path)
        return True
    except CtlError as exc:
        if str(exc) == "not found":
            return False
        raise


def missing_vhost(api: Api, vhost: str) -> CtlError | None:
    """What every verb says of a vhost that does not exist, or None when
    it does (or is not ours to see: then say what we know)."""
    try:
        vhost_exists = exists(api, f"/vhosts/{vhost_path(vhost)}")
    except CtlError:
        vhost_exists = True
    if not vhost_exists:
        return CtlError(f"virtual host '{vhost}' does not exist", EX_DATAERR)
    return None


def not_found_as(api: Api, vhost: str, exc: CtlError, what: str) -> CtlError:
    """A bare 404 said as what was missing: the vhost, worded as every
    verb words it, else `what`."""
    if str(exc) == "not found":
        return missing_vhost(api, vhost) or CtlError(f"{what} not found", EX_DATAERR)
    return exc
