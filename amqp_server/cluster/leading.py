"""Connecting a leader's stores to its shipper, and its cluster port to
the followers.

Nothing here knows the broker's classes: `attach` is handed the broker and
connects the stores it holds (message store with its streams, definition
log, policies, dead-letter log, dead-letter archive) to a Shipper, as
storage/replication.py describes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from . import frames as f, handshake
from .archive_shipping import ArchiveShipping
from .follower import keep_alive
from .shipper import Shipper, Sources

log = logging.getLogger("amqp_server.cluster")


def sources_of(broker) -> Sources:
    archive = broker.archiver.directory if broker.archiver is not None else None
    return Sources(broker.config.data_dir, broker.journal.content, broker.policies.document,
                   archive)


def attach(broker, shipper: Shipper) -> None:
    """From now on everything the broker's stores write is shipped, and
    what waits for the disk waits for the in-sync copies too."""
    broker.store.ship_to(shipper)
    broker.journal.ship_to(shipper)
    broker.policies.ship_to(lambda document: shipper.ship([f.POLICIES, 0, document]))
    node = shipper.node
    log_id = broker.dead_letter_log.log_id
    broker.dead_letter_log.ship_to(lambda batch: shipper.ship(
        [f.DEAD_LETTERS, 0, node, log_id, [list(event) for event in batch]]))
    shipper.on_hold = broker.replication_held
    if broker.archiver is not None:
        broker.archiver.replication = ArchiveShipping(shipper, broker.archiver.directory)


def detach(broker) -> None:
    broker.policies.ship_to(None)
    if broker.archiver is not None:
        broker.archiver.replication = None
    if broker.dead_letter_log is not None:
        broker.dead_letter_log.ship_to(None)


async def listen(host: str, port: int, secret: bytes, cluster: str, node: str,
                 shipper: Callable[[], Shipper | None], tls=None) -> asyncio.Server:
    """The cluster port: members that prove they know the secret are served
    by the current shipper (this node leads), others are cut off."""

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = f.FrameStream(reader)
        try:
            follower = await handshake.accept(frames, writer, secret, cluster, node)
        except (handshake.HandshakeError, OSError, TimeoutError,
                asyncio.IncompleteReadError) as exc:
            peer = writer.get_extra_info("peername")
            log.warning("cluster connection from %s refused: %s", peer, exc)
            writer.close()
            return
        keep_alive(writer)
        current = shipper()
        if current is None or current.stopped:
            writer.close()  # not the leader (any more): the follower looks again
            return
        await current.serve(follower, frames, writer)

    return await asyncio.start_server(connected, host, port, reuse_address=True,
                                      limit=1 << 22, ssl=tls,
                                      ssl_handshake_timeout=handshake.TIMEOUT if tls else None)
