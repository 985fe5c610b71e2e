"""The differential tests compare with RabbitMQ only: this broker, which
listens on RabbitMQ's ports by default, is never taken for the reference,
and under CI a missing reference fails the run instead of skipping."""

from __future__ import annotations

import socket

import pytest

from .conftest import amqp_product, management_product, require_rabbitmq


def test_this_broker_is_not_taken_for_rabbitmq(broker, monkeypatch):
    product = amqp_product(broker.url)
    assert product == "amqp-server"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="is 'amqp-server', not RabbitMQ"):
        require_rabbitmq(product, broker.url, "start one")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="is 'amqp-server', not RabbitMQ"):
        require_rabbitmq(product, broker.url, "start one")


def test_nor_its_management_api(broker):
    assert management_product(broker.management_url) == "amqp-server"


def test_a_missing_reference_fails_under_ci(monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    assert amqp_product(url) is None
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no reference RabbitMQ reachable"):
        require_rabbitmq(None, url, "start one")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no reference RabbitMQ reachable"):
        require_rabbitmq(None, url, "start one")


def test_the_reference_is_rabbitmq(rabbitmq_url, rabbitmq_management_url):
    assert amqp_product(rabbitmq_url) == "RabbitMQ"
    assert management_product(rabbitmq_management_url) == "RabbitMQ"
