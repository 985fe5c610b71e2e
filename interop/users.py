"""Users made with amqpctl, and pika connections logged in as them."""

from __future__ import annotations

import urllib.error
import urllib.request

import pika

from policies.ctl import main as amqpctl


def ctl(broker, *argv: str) -> int:
    port = broker.management_url.rsplit(":", 1)[1]
    return amqpctl(["--port", port, *argv])


def connect(broker, user: str = "bob", password: str = "secret", vhost: str = "/"):
    url = broker.url.replace("guest:guest", f"{user}:{password}")
    url = url.rsplit("/", 1)[0] + "/" + urllib.request.quote(vhost, safe="")
    return pika.BlockingConnection(pika.URLParameters(url))
