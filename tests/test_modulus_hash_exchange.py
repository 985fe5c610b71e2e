"""The x-modulus-hash exchange of RabbitMQ 4.3 (rabbit_exchange_type_
modulus_hash.erl, v4.3.5): Erlang's phash2 of the routing keys, modulo the
sorted destinations; only a 4.3 virtual host declares one."""

from __future__ import annotations

import pytest

from amqp_server.broker.erlang_hash import phash2
from amqp_server.broker.modulus_hash import PHASH2_RANGE
from amqp_server.broker.vhost import VirtualHost
from amqp_server.errors import AMQPError

from .messages import FakeClock, message


@pytest.mark.parametrize("keys,expected", [
    # erlang:phash2(Keys, 134217728) as Erlang/OTP answers it
    ([b"order.1"], 123332820),
    ([b"a"], 53691870),
    ([b""], 38220213),
    ([b"k", b"cc"], 82970934),
    ([b"a much longer routing key than twelve bytes"], 117367454),
])
def test_phash2_is_erlangs(keys, expected):
    assert phash2(keys, PHASH2_RANGE) == expected


def test_phash2_masks_a_power_of_two_range_and_takes_the_rest_of_another():
    full = phash2([b"a"], 1 << 32)
    assert phash2([b"a"], 1 << 27) == full & ((1 << 27) - 1)
    assert phash2([b"a"], 1000) == full % 1000


@pytest.fixture
def vhost():
    host = VirtualHost("/", clock=FakeClock(), semantics="4.3")
    host.declare_exchange("shard", "x-modulus-hash")
    for name in ("q-c", "q-a", "q-b"):
        host.declare_queue(name, None, durable=True)
        host.bind("shard", host.queues[name], "", None)
    return host


def routed(vhost, key: str) -> list[str]:
    msg = message(key, exchange="shard")
    return [queue.name for queue in vhost.route(vhost.exchanges["shard"], list(msg.routing_keys),
                                                msg)]


def test_each_message_goes_to_one_destination_by_its_keys_hash(vhost):
    # route/3: lists:nth(Hash rem Len + 1, lists:sort(Destinations))
    for key in ("order.1", "a", "user-42"):
        index = phash2([key.encode()], PHASH2_RANGE) % 3
        assert routed(vhost, key) == [["q-a", "q-b", "q-c"][index]]


def test_a_key_keeps_its_destination(vhost):
    assert len({tuple(routed(vhost, "order.7")) for _ in range(5)}) == 1


def test_every_destination_takes_some_keys(vhost):
    taken = {routed(vhost, f"key-{n}")[0] for n in range(60)}
    assert taken == {"q-a", "q-b", "q-c"}


def test_exchanges_sort_before_queues(vhost):
    vhost.declare_exchange("z-exchange", "fanout")
    vhost.bind("shard", vhost.exchanges["z-exchange"], "", None)
    ordered = [dest.name for dest in vhost.exchanges["shard"].destinations()]
    assert ordered == ["z-exchange", "q-a", "q-b", "q-c"]


def test_no_binding_routes_nowhere():
    host = VirtualHost("/", clock=FakeClock(), semantics="4.3")
    host.declare_exchange("shard", "x-modulus-hash")
    msg = message("k", exchange="shard")
    assert host.route(host.exchanges["shard"], ["k"], msg) == ()


def test_3_13_has_no_such_exchange_type():
    host = VirtualHost("/", clock=FakeClock())
    with pytest.raises(AMQPError, match="unknown exchange type 'x-modulus-hash'"):
        host.declare_exchange("shard", "x-modulus-hash")
