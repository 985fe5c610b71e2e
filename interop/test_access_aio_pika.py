"""The permission checks through aio-pika: each refusal closes the channel
with 403 and RabbitMQ's wording, the connection carries on, and what the
permissions allow works."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aiormq.exceptions import ChannelAccessRefused, ProbableAuthenticationError

from .users import ctl

REFUSED = "ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user 'bob'"


@pytest.fixture
def bob_url(broker):
    """bob: configure ^bob\\., write ^bob\\. and the default exchange, read ^bob\\."""
    assert ctl(broker, "add_user", "bob", "secret") == 0
    assert ctl(broker, "set_permissions", "bob", r"^bob\.", r"^bob\.|^amq\.default$",
               r"^bob\.") == 0
    return broker.url.replace("guest:guest", "bob:secret")


async def refusal(connection, action) -> str:
    """Run `action(channel)` on a fresh channel; the 403 text it got."""
    channel = await connection.channel()
    with pytest.raises(ChannelAccessRefused) as info:
        await action(channel)
    return str(info.value)


async def scenario(url: str) -> list[tuple[str, str]]:
    connection = await aio_pika.connect(url)
    seen = []

    async def check(what: str, action, kind: str, name: str) -> None:
        text = await refusal(connection, action)
        seen.append((what, REFUSED.format(kind=kind, name=name) in text))

    # configure: declare and delete
    await check("declare exchange", lambda ch: ch.declare_exchange("orders", "fanout"),
                "exchange", "orders")
    await check("declare queue", lambda ch: ch.declare_queue("orders"), "queue", "orders")
    await check("delete exchange", lambda ch: ch.exchange_delete("amq.fanout"),
                "exchange", "amq.fanout")
    # the dead-letter exchange needs write, at declare
    await check("dead-letter exchange",
                lambda ch: ch.declare_queue(
                    "bob.work", arguments={"x-dead-letter-exchange": "amq.fanout"}),
                "exchange", "amq.fanout")

    channel = await connection.channel()
    events = await channel.declare_exchange("bob.events", "fanout")
    work = await channel.declare_queue("bob.work", arguments={
        "x-dead-letter-exchange": "bob.events"})
    await work.bind(events)
    # write: publishing to an exchange without write is refused (confirm mode
    # sees the channel close)
    await check("publish", lambda ch: _publish(ch, "amq.topic"), "exchange", "amq.topic")
    # read: get and consume on queues outside ^bob\.
    await channel.default_exchange.publish(aio_pika.Message(b"own"), "bob.work")
    got = await work.get(timeout=5)
    await got.reject()  # dead-lettered to bob.events, bound back to bob.work
    seen.append(("dead-lettered", (await work.get(timeout=5)).body == b"own"))
    admin = await aio_pika.connect(url.replace("bob:secret", "guest:guest"))
    admin_channel = await admin.channel()
    await admin_channel.declare_queue("private")
    await admin.close()
    await check("get", lambda ch: _get(ch, "private"), "queue", "private")
    await check("consume", lambda ch: _consume(ch, "private"), "queue", "private")
    # bind needs read on the exchange
    await check("bind", lambda ch: _bind(ch, "bob.work", "amq.topic"), "exchange",
                "amq.topic")
    await connection.close()
    return seen


async def _publish(channel, exchange: str):
    target = await channel.get_exchange(exchange, ensure=False)
    return await target.publish(aio_pika.Message(b"x"), "k")


async def _get(channel, queue: str):
    return await (await channel.get_queue(queue, ensure=False)).get(fail=False)


async def _consume(channel, queue: str):
    async def ignore(message) -> None:
        pass

    return await (await channel.get_queue(queue, ensure=False)).consume(ignore)


async def _bind(channel, queue: str, exchange: str):
    return await (await channel.get_queue(queue, ensure=False)).bind(exchange, "k")


def test_permission_checks_through_aio_pika(broker, bob_url):
    seen = asyncio.run(scenario(bob_url))
    assert seen == [(what, True) for what, _ in seen]
    assert [what for what, _ in seen] == [
        "declare exchange", "declare queue", "delete exchange", "dead-letter exchange",
        "publish", "dead-lettered", "get", "consume", "bind"]


def test_bad_password_through_aio_pika(broker):
    async def attempt():
        with pytest.raises(ProbableAuthenticationError) as info:
            await aio_pika.connect(broker.url.replace("guest:guest", "guest:wrong"))
        return str(info.value)

    assert "ACCESS_REFUSED - Login was refused" in asyncio.run(attempt())
