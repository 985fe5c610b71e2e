"""Fixtures: a real broker on an ephemeral loopback port, real clients, and a
reference RabbitMQ for differential tests when one is reachable."""

from __future__ import annotations

import os
import socket

import pika
import pytest

from amqp_server.testing import BrokerThread

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@pytest.fixture
def broker():
    with BrokerThread() as running:
        yield running


@pytest.fixture
def connection(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection):
    return connection.channel()


def rabbitmq_reachable(url: str = RABBITMQ_URL) -> bool:
    params = pika.URLParameters(url)
    try:
        with socket.create_connection((params.host, params.port), timeout=1):
            pass
        conn = pika.BlockingConnection(params)
        conn.close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def rabbitmq_url():
    if not rabbitmq_reachable():
        pytest.skip(f"no reference RabbitMQ reachable at {RABBITMQ_URL}: install and start "
                    "Debian's rabbitmq-server (as .ci/run does) to run differential tests")
    return RABBITMQ_URL
