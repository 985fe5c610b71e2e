"""The same permission refusals against this broker and a real RabbitMQ
(user made with rabbitmqctl add_user / set_permissions there, amqpctl
here): identical reply codes and texts."""

from __future__ import annotations

import shutil
import subprocess

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from .users import connect, ctl

USER, PASSWORD = "permcheck", "permcheck-pw"
PERMS = (r"^pc\.", r"^pc\.|^amq\.default$", r"^pc\.")

SCENARIOS = {
    "declare exchange": lambda ch: ch.exchange_declare("other.x", "fanout"),
    "declare queue": lambda ch: ch.queue_declare("other.q"),
    "delete queue": lambda ch: ch.queue_delete("other.q"),
    "dlx at declare": lambda ch: ch.queue_declare(
        "pc.work", arguments={"x-dead-letter-exchange": "amq.fanout"}),
    "get": lambda ch: ch.basic_get("other.q"),
    "consume": lambda ch: ch.basic_consume("other.q", lambda *a: None),
    "bind to an unreadable exchange": lambda ch: (ch.queue_declare("pc.q"),
                                                  ch.queue_bind("pc.q", "amq.topic", "k")),
    "allowed": lambda ch: (ch.exchange_declare("pc.x", "fanout"), ch.queue_declare("pc.q"),
                           ch.queue_bind("pc.q", "pc.x"), ch.basic_get("pc.q")),
}


def observe(conn) -> dict:
    seen = {}
    for name, action in SCENARIOS.items():
        channel = conn.channel()
        try:
            action(channel)
            seen[name] = "ok"
            channel.close()
        except ChannelClosedByBroker as exc:
            seen[name] = (exc.reply_code, exc.reply_text)
    return seen


@pytest.fixture
def rabbit_user(rabbitmq_url):
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: cannot make the user on RabbitMQ")

    def run(*argv):
        subprocess.run(["rabbitmqctl", "-q", *argv], check=False, capture_output=True,
                       timeout=60)
    run("delete_user", USER)
    run("add_user", USER, PASSWORD)
    run("set_permissions", "-p", "/", USER, *PERMS)
    admin = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    admin.channel().queue_declare("other.q")
    yield rabbitmq_url.replace("guest:guest", f"{USER}:{PASSWORD}")
    channel = admin.channel()
    for queue in ("other.q", "pc.q"):
        channel.queue_delete(queue)
    channel.exchange_delete("pc.x")
    admin.close()
    run("delete_user", USER)


def test_permission_refusals_match_rabbitmq(broker, rabbit_user):
    assert ctl(broker, "add_user", USER, PASSWORD) == 0
    assert ctl(broker, "set_permissions", USER, *PERMS) == 0
    admin = pika.BlockingConnection(pika.URLParameters(broker.url))
    admin.channel().queue_declare("other.q")
    ours = observe(connect(broker, USER, PASSWORD))
    theirs = observe(pika.BlockingConnection(pika.URLParameters(rabbit_user)))
    assert ours == theirs
    assert theirs["allowed"] == "ok" and theirs["get"][0] == 403
