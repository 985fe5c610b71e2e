"""Calls to a broker's management API and amqpctl, as a user's tools make
them: (status, decoded body) of one request, amqpctl's exit code."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from policies import ctl


def http(broker, method: str, path: str, body=None, auth=("guest", "guest")):
    return call(broker.management_url, method, path, body, auth)


def call(base_url: str, method: str, path: str, body=None, auth=("guest", "guest")):
    """(status, decoded JSON body or text) of one request to a management API."""
    data = json.dumps(body).encode() if body is not None else None
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(base_url + path, data=data, method=method,
                                     headers={"Authorization": f"Basic {token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw and response.headers.get(
                "Content-Type", "").startswith("application/json") else raw.decode())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def queue_shown(broker, name: str) -> dict:
    """A queue of the default virtual host as GET /api/queues/%2F/{name} shows it."""
    return http(broker, "GET", f"/api/queues/%2F/{name}")[1]


def consumers_listed(broker, name: str) -> dict:
    """consumer tag -> (active, activity_status), as that queue lists them."""
    return {c["consumer_tag"]: (c["active"], c["activity_status"])
            for c in queue_shown(broker, name)["consumer_details"]}


def amqpctl(broker, *argv: str) -> int:
    port = str(broker.server.management.port)
    return ctl.main(["--port", port, *argv])


def fetch(broker, path: str):
    try:
        with urllib.request.urlopen(broker.management_url + path, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()
