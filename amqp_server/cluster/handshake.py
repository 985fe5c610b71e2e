"""Members of one cluster recognise each other by a shared secret.

Before anything else on a cluster connection, the connecting side (a
follower) says who it is, the accepting side (the leader) answers with a
fresh random nonce, the follower proves it knows the secret with an HMAC
over both nonces, and only then does the leader prove the same and send
anything of value.  A stranger learns one random nonce and is cut off.
The proofs name their role, so one side's answer can never be replayed as
the other's.

The same secret signs what a follower forwards to the leader on behalf of a
client (its real address, see forwarding.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import ssl

from . import frames as f

MAGIC = b"AMQPCLUSTER1\n"
TIMEOUT = 5.0


class HandshakeError(Exception):
    """The peer is not a member of this cluster (or not speaking its protocol)."""


def proof(secret: bytes, role: str, *parts: bytes | str) -> bytes:
    mac = hmac.new(secret, role.encode(), hashlib.sha256)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        mac.update(len(data).to_bytes(4, "big"))
        mac.update(data)
    return mac.digest()


async def _next(frames: f.FrameStream) -> list:
    try:
        frame = await frames.next()
    except f.FrameError as exc:
        raise HandshakeError(str(exc)) from None
    if frame is None:
        raise HandshakeError("the peer closed the connection")
    return frame


async def accept(frames: f.FrameStream, writer: asyncio.StreamWriter, secret: bytes,
                 cluster: str, leader: str) -> str:
    """The leader's side; returns the follower's node name."""
    async with asyncio.timeout(TIMEOUT):
        magic = await frames.reader.readexactly(len(MAGIC))
        if magic != MAGIC:
            raise HandshakeError("not a cluster connection")
        hello = await _next(frames)
        if (len(hello) != 4 or hello[0] != "hello" or not isinstance(hello[1], str)
                or hello[2] != cluster or not isinstance(hello[3], bytes)):
            raise HandshakeError("not a member of this cluster")
        node, nonce_c = hello[1], hello[3]
        nonce_s = os.urandom(16)
        writer.write(f.encode(["nonce", nonce_s]))
        answer = await _next(frames)
        expected = proof(secret, "follower", cluster, node, nonce_s, nonce_c)
        if (len(answer) != 2 or answer[0] != "proof" or not isinstance(answer[1], bytes)
                or not hmac.compare_digest(answer[1], expected)):
            raise HandshakeError(f"node {node!r} does not know the cluster secret")
        writer.write(f.encode(["welcome", leader,
                               proof(secret, "leader", cluster, leader, nonce_c, nonce_s)]))
        await writer.drain()
        return node


async def connect(frames: f.FrameStream, writer: asyncio.StreamWriter, secret: bytes,
                  cluster: str, node: str) -> str:
    """The follower's side; returns the leader's node name."""
    async with asyncio.timeout(TIMEOUT):
        nonce_c = os.urandom(16)
        writer.write(MAGIC + f.encode(["hello", node, cluster, nonce_c]))
        challenge = await _next(frames)
        if len(challenge) != 2 or challenge[0] != "nonce" or not isinstance(challenge[1], bytes):
            raise HandshakeError("the peer is not a cluster leader")
        nonce_s = challenge[1]
        writer.write(f.encode(["proof", proof(secret, "follower", cluster, node, nonce_s,
                                              nonce_c)]))
        welcome = await _next(frames)
        if len(welcome) != 3 or welcome[0] != "welcome" or not isinstance(welcome[1], str):
            raise HandshakeError("the peer refused this node")
        leader = welcome[1]
        if not hmac.compare_digest(welcome[2], proof(secret, "leader", cluster, leader,
                                                     nonce_c, nonce_s)):
            raise HandshakeError("the peer does not know the cluster secret")
        return leader


def tls_contexts(certfile: str, keyfile: str, cafile: str
                 ) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(the leader's, the follower's) contexts for the cluster port, or
    (None, None) without TLS.  Both sides present their certificate and
    require the other's, signed by `cafile`; the node names and addresses
    are not checked against it (the secret says who is a member)."""
    if not certfile:
        return None, None
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(certfile, keyfile)
    server.load_verify_locations(cafile)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.load_cert_chain(certfile, keyfile)
    client.load_verify_locations(cafile)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_REQUIRED
    return server, client
