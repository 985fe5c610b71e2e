"""amqps: a second listener with the standard library's ssl module, a CA and
certificates made by the test, pika's SSL options and aio-pika amqps:// URLs,
optional and required client certificates."""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import quote

import aio_pika
import pika
import pytest
import trustme

from amqp_server.cli import main
from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import call


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client one."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    files = {"ca": folder / "ca.pem", "server": folder / "server.pem",
             "client": folder / "client.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(files["server"]))
    ca.issue_cert("client@example").private_key_and_cert_chain_pem.write_to_path(
        str(files["client"]))
    return {name: str(path) for name, path in files.items()}


def tls_broker(pki, **settings) -> BrokerThread:
    return BrokerThread(BrokerConfig(port=0, management_port=0, tls_port=0,
                                     tls_certfile=pki["server"], tls_keyfile=pki["server"],
                                     tls_cacertfile=pki["ca"], **settings))


def pika_params(broker, pki, client_cert: bool = False) -> pika.ConnectionParameters:
    context = ssl.create_default_context(cafile=pki["ca"])
    if client_cert:
        context.load_cert_chain(pki["client"])
    return pika.ConnectionParameters(
        host="127.0.0.1", port=broker.tls_port, ssl_options=pika.SSLOptions(context),
        credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1)


def round_trip(conn: pika.BlockingConnection, queue: str) -> bytes:
    channel = conn.channel()
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"over tls")
    return channel.basic_get(queue, auto_ack=True)[2]


def test_pika_over_tls_beside_plain_amqp(pki):
    with tls_broker(pki) as broker:
        assert broker.tls_port not in (0, broker.port)
        conn = pika.BlockingConnection(pika_params(broker, pki))
        assert round_trip(conn, "secure") == b"over tls"
        # the same broker: a plain connection sees what came over TLS
        conn.channel().basic_publish("", "secure", b"crosses listeners")
        plain = pika.BlockingConnection(pika.URLParameters(broker.url))
        assert plain.channel().basic_get("secure", auto_ack=True)[2] == b"crosses listeners"
        # Each connection's transport and listening port, as list_connections shows them.
        listed = sorted((c["port"], c["ssl"]) for c in
                        call(broker.management_url, "GET", "/api/connections")[1])
        assert listed == sorted([(broker.port, False), (broker.tls_port, True)])
        plain.close()
        conn.close()


def test_client_that_does_not_trust_the_server_fails(pki):
    other_ca = trustme.CA()
    context = ssl.create_default_context()
    other_ca.configure_trust(context)
    with tls_broker(pki) as broker:
        params = pika.ConnectionParameters(host="127.0.0.1", port=broker.tls_port,
                                           ssl_options=pika.SSLOptions(context),
                                           connection_attempts=1)
        with pytest.raises(ssl.SSLCertVerificationError):
            pika.BlockingConnection(params)
        # the listener survives a failed handshake
        conn = pika.BlockingConnection(pika_params(broker, pki))
        assert round_trip(conn, "after-failure") == b"over tls"
        conn.close()


def test_required_client_certificate(pki):
    with tls_broker(pki, tls_verify_peer=True, tls_fail_if_no_peer_cert=True) as broker:
        with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError)):
            conn = pika.BlockingConnection(pika_params(broker, pki))
            # TLS 1.3 reports the missing certificate after the handshake
            round_trip(conn, "refused")
        conn = pika.BlockingConnection(pika_params(broker, pki, client_cert=True))
        assert round_trip(conn, "with-cert") == b"over tls"
        conn.close()


def test_optional_client_certificate(pki):
    with tls_broker(pki, tls_verify_peer=True) as broker:
        for client_cert in (False, True):
            conn = pika.BlockingConnection(pika_params(broker, pki, client_cert))
            assert round_trip(conn, f"optional-{client_cert}") == b"over tls"
            conn.close()


def test_aio_pika_amqps_url(pki):
    async def scenario(url: str) -> bytes:
        connection = await aio_pika.connect(url)
        channel = await connection.channel()
        queue = await channel.declare_queue("aio-secure")
        await channel.default_exchange.publish(aio_pika.Message(b"amqps"), "aio-secure")
        message = await queue.get(timeout=5)
        await message.ack()
        await connection.close()
        return message.body

    with tls_broker(pki, tls_verify_peer=True, tls_fail_if_no_peer_cert=True) as broker:
        url = (f"amqps://guest:guest@127.0.0.1:{broker.tls_port}/?cafile={quote(pki['ca'])}"
               f"&certfile={quote(pki['client'])}&keyfile={quote(pki['client'])}")
        assert asyncio.run(scenario(url)) == b"amqps"


def test_unusable_certificate_is_a_clear_error(tmp_path, capsys):
    config = tmp_path / "broker.toml"
    config.write_text(f'port = 0\nmanagement_port = -1\ntls_port = 0\n'
                      f'tls_certfile = "{tmp_path}/missing.pem"\n'
                      f'tls_keyfile = "{tmp_path}/missing.pem"\n')
    assert main(["--config", str(config), "--data-dir", str(tmp_path / "data")]) == 2
    assert "TLS certificate, key or CA file cannot be used" in capsys.readouterr().err
