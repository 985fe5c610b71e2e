"""A leader broker and a follower's copy of its data directory, paired over
the cluster port without etcd (the in-sync set is given), and a broker
booted from the copy."""

from __future__ import annotations

import asyncio

from amqp_server.broker.broker import Broker
from amqp_server.cluster.follower import Following
from amqp_server.cluster.leading import attach, listen, sources_of
from amqp_server.cluster.replica import Replica
from amqp_server.cluster.shipper import Shipper
from amqp_server.config import BrokerConfig
from amqp_server.server import Server
from amqp_server.storage.dead_letter_log import LogFiles

SECRET = b"s3cret"


CLUSTER = "test"


class Leader:
    def __init__(self, data_dir, in_sync=("a", "b"), min_in_sync=2) -> None:
        self.config = BrokerConfig(data_dir=str(data_dir), port=0, management_port=-1,
                                   prometheus_port=-1, node_name="a")
        self.broker = Broker(self.config)
        self.server = Server(self.broker)
        self.in_sync = in_sync
        self.min_in_sync = min_in_sync
        self.isr_writes: list[tuple[str, ...]] = []

    async def start(self, queues: tuple[str, ...] = (), tls=None) -> None:
        await self.server.start()
        for name in queues:  # durable queues there before shipping starts
            self.broker.vhosts["/"].declare_queue(name, None, durable=True)

        async def write_isr(names: tuple[str, ...]) -> None:
            self.isr_writes.append(names)

        self.shipper = Shipper("a", 1, sources_of(self.broker), min_in_sync=self.min_in_sync,
                               lag_timeout=30.0, in_sync=self.in_sync, isr=write_isr)
        attach(self.broker, self.shipper)
        self.shipper.start()
        self.listener = await listen("127.0.0.1", 0, SECRET, CLUSTER, "a",
                                     lambda: self.shipper, tls=tls)
        self.cluster_port = self.listener.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.server.port}/"

    async def stop(self) -> None:
        self.shipper.stop()
        self.listener.close()
        await self.server.stop()


def follower(data_dir, node="b", secret=SECRET, tls=None) -> tuple[Replica, Following]:
    replica = Replica(data_dir, LogFiles(data_dir / "dead-letters", 1 << 20, 3600, 1 << 30))
    return replica, Following(replica, node, CLUSTER, secret, tls)


async def wait_for(predicate, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def stop_pair(leader: Leader, replica: Replica, following: Following, task) -> None:
    """The follower stops following (its task, if it began, ends), then the
    leader stops and the follower's copy is closed."""
    following.stop()
    if task is not None:
        await task
    await leader.stop()
    replica.close()


def booted(data_dir) -> Broker:
    broker = Broker(BrokerConfig(data_dir=str(data_dir), port=0, management_port=-1,
                                 prometheus_port=-1))
    problems = broker.open_data_dir()
    assert problems == []
    return broker
