"""Direct reply-to (`amq.rabbitmq.reply-to`), compared with a real RabbitMQ
by what pika observes: an RPC round trip, the reply name, the delivery
tags replies carry, mandatory replies, and each misuse's error."""

from __future__ import annotations

import asyncio

import aio_pika
import pika
from pika.exceptions import ChannelClosedByBroker

from .waiting import wait_for

PSEUDO = "amq.rabbitmq.reply-to"


def settle(conn, condition, seconds: float = 5.0) -> None:
    wait_for(condition, seconds, step=lambda: conn.process_data_events(time_limit=0.05))
    conn.process_data_events(time_limit=0.1)  # and nothing more comes


def round_trip(url: str) -> dict:
    """A client asks twice on one channel with reply_to set to the pseudo-
    queue; a server answers each on its reply_to (the second with
    mandatory); then a normal delivery on the client's channel."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_delete("drt.requests")
    setup.queue_declare("drt.requests")
    setup.queue_delete("drt.other")
    setup.queue_declare("drt.other")
    client = conn.channel()
    replies: list = []
    ctag = client.basic_consume(PSEUDO, lambda ch, m, p, b: replies.append((m, p, b)),
                                auto_ack=True)
    server = conn.channel()
    requests: list = []
    server.basic_consume("drt.requests", lambda ch, m, p, b: requests.append((m, p, b)),
                         auto_ack=True)
    returned: list = []
    server.add_on_return_callback(lambda ch, m, p, b: returned.append((m.reply_code, b)))
    for n in (1, 2):
        client.basic_publish("", "drt.requests", f"ask {n}".encode(), pika.BasicProperties(
            reply_to=PSEUDO, correlation_id=str(n)))
    settle(conn, lambda: len(requests) == 2)
    names = [p.reply_to for _, p, _ in requests]
    for index, (_, props, body) in enumerate(requests):
        server.basic_publish("", props.reply_to, body.replace(b"ask", b"answer"),
                             pika.BasicProperties(correlation_id=props.correlation_id),
                             mandatory=index == 1)
    settle(conn, lambda: len(replies) == 2 and returned)
    seen = {
        "reply name": (names[0].startswith(PSEUDO + ".") and len(names[0]) > len(PSEUDO) + 8,
                       names[0] == names[1]),
        "replies": [(m.consumer_tag == ctag, m.delivery_tag, m.exchange, m.routing_key == names[0],
                     m.redelivered, p.correlation_id, b.decode()) for m, p, b in replies],
        "mandatory reply returned too": returned,
    }
    declared = setup.queue_declare(names[0], passive=True).method
    seen["declare the reply name"] = (declared.message_count, declared.consumer_count)
    declared = setup.queue_declare(PSEUDO).method
    seen["declare the pseudo-queue"] = (declared.queue, declared.message_count,
                                        declared.consumer_count)
    # Through another exchange nothing reaches the reply consumer.
    server.basic_publish("amq.direct", names[0], b"via amq.direct")
    # A normal consumer on the client's channel: the replies took no tag.
    got: list = []
    client.basic_consume("drt.other", lambda ch, m, p, b: got.append(m.delivery_tag))
    setup.basic_publish("", "drt.other", b"normal")
    settle(conn, lambda: got)
    seen["normal delivery tag after replies"] = got
    seen["replies after amq.direct"] = len(replies)
    client.basic_cancel(ctag)
    server.basic_publish("", names[0], b"too late")
    conn.process_data_events(time_limit=0.2)
    seen["replies after cancel"] = len(replies)
    try:
        setup.queue_declare(names[0], passive=True)
        seen["declare after cancel"] = "ok"
    except ChannelClosedByBroker as exc:
        seen["declare after cancel"] = (exc.reply_code, exc.reply_text.replace(names[0], "N"))
    cleanup = conn.channel()
    cleanup.queue_delete("drt.requests")
    cleanup.queue_delete("drt.other")
    conn.close()
    return seen


def test_rpc_round_trip_as_in_rabbitmq(broker, rabbitmq_url):
    ours = round_trip(broker.url)
    assert ours == round_trip(rabbitmq_url)
    assert ours["replies"] == [(True, 1, "", True, False, "1", "answer 1"),
                               (True, 1, "", True, False, "2", "answer 2")]
    assert ours["mandatory reply returned too"] == [(312, b"answer 2")]
    assert ours["declare after cancel"][0] == 404


def misuse(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    seen = {}

    def attempt(name, action):
        channel = conn.channel()
        closed: list = []
        channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
        try:
            action(channel)
            conn.process_data_events(time_limit=0.2)
        except ChannelClosedByBroker:
            pass
        seen[name] = next(((r.reply_code, r.reply_text) for r in closed
                           if isinstance(r, ChannelClosedByBroker)), "ok")

    noop = lambda *a: None  # noqa: E731
    attempt("consume with acks", lambda ch: ch.basic_consume(PSEUDO, noop))
    attempt("consume twice", lambda ch: (ch.basic_consume(PSEUDO, noop, auto_ack=True),
                                         ch.basic_consume(PSEUDO, noop, auto_ack=True)))
    attempt("request without a reply consumer", lambda ch: (
        ch.confirm_delivery(),
        ch.basic_publish("", "nowhere", b"x", pika.BasicProperties(reply_to=PSEUDO))))
    attempt("consume a reply name", lambda ch: ch.basic_consume(PSEUDO + ".abc", noop,
                                                                 auto_ack=True))
    attempt("declare an unknown reply name", lambda ch: ch.queue_declare(PSEUDO + ".bogus"))
    attempt("reply to an unknown name", lambda ch: (
        ch.confirm_delivery(), ch.basic_publish("", PSEUDO + ".bogus", b"x")))

    def ack_a_reply(ch):
        """Ask through a queue and answer from the same channel: the get
        takes tag 1, the reply comes with tag 2 (not taken), its ack fails."""
        tags = []
        ch.basic_consume(PSEUDO, lambda c, m, p, b: tags.append(m.delivery_tag), auto_ack=True)
        ch.queue_declare("drt.loop")
        ch.basic_publish("", "drt.loop", b"ask", pika.BasicProperties(reply_to=PSEUDO))
        _, props, _ = ch.basic_get("drt.loop", auto_ack=True)
        ch.basic_publish("", props.reply_to, b"answer")
        settle(conn, lambda: tags)
        ch.queue_delete("drt.loop")
        ch.basic_ack(tags[0])
    attempt("ack a reply", ack_a_reply)
    conn.close()
    return seen


def test_misuse_errors_as_in_rabbitmq(broker, rabbitmq_url):
    ours = misuse(broker.url)
    assert ours == misuse(rabbitmq_url)
    assert ours["consume with acks"] == (
        406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")
    assert ours["request without a reply consumer"] == (
        406, "PRECONDITION_FAILED - fast reply consumer does not exist")
    assert ours["ack a reply"] == (406, "PRECONDITION_FAILED - unknown delivery tag 2")


def test_capability_is_advertised(connection):
    capabilities = connection._impl.server_properties["capabilities"]
    assert capabilities["direct_reply_to"] is True


def test_aio_pika_rpc_over_direct_reply_to(broker):
    """The README's example: an aio-pika client and server."""
    async def scenario() -> list[bytes]:
        server_conn = await aio_pika.connect(broker.url)
        server = await server_conn.channel()
        requests = await server.declare_queue("rpc.square")

        async def answer(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                result = str(int(message.body) ** 2).encode()
                await server.default_exchange.publish(
                    aio_pika.Message(result, correlation_id=message.correlation_id),
                    routing_key=message.reply_to)
        await requests.consume(answer)

        client_conn = await aio_pika.connect(broker.url)
        client = await client_conn.channel()
        replies = await client.get_queue(PSEUDO, ensure=False)
        pending: dict[str, asyncio.Future] = {}

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            pending.pop(message.correlation_id).set_result(message.body)
        await replies.consume(on_reply, no_ack=True)
        answers = []
        for n in range(1, 6):
            pending[str(n)] = asyncio.get_running_loop().create_future()
            await client.default_exchange.publish(
                aio_pika.Message(str(n).encode(), correlation_id=str(n), reply_to=PSEUDO),
                routing_key="rpc.square")
            answers.append(await asyncio.wait_for(pending[str(n)], 5))
        await client_conn.close()
        await server_conn.close()
        return answers

    assert asyncio.run(scenario()) == [b"1", b"4", b"9", b"16", b"25"]


def test_requests_published_in_bursts_all_carry_the_reply_name(connection):
    """Publishes read together take the run paths (same properties, or the
    same but for the correlation id, with BCC stripped): each request is named."""
    client = connection.channel()
    client.basic_consume(PSEUDO, lambda *a: None, auto_ack=True)
    client.queue_declare("drt.burst")
    client.queue_declare("drt.bcc")
    same = pika.BasicProperties(reply_to=PSEUDO)
    for _ in range(100):
        client.basic_publish("", "drt.burst", b"same", same)
    for n in range(100):
        client.basic_publish("", "drt.burst", b"own", pika.BasicProperties(
            reply_to=PSEUDO, correlation_id=str(n), headers={"BCC": ["drt.bcc"]}))
    names = set()
    same_bcc = pika.BasicProperties(reply_to=PSEUDO, headers={"BCC": ["drt.bcc"]})
    for _ in range(100):
        client.basic_publish("", "drt.burst", b"same with BCC", same_bcc)
    for queue in ("drt.burst",) * 300 + ("drt.bcc",) * 200:
        method, props, _ = client.basic_get(queue, auto_ack=True)
        assert method is not None
        assert props.headers is None or "BCC" not in props.headers
        names.add(props.reply_to)
    assert len(names) == 1 and names.pop().startswith(PSEUDO + ".")
