"""The permission check the channel's parts make before a method, as
RabbitMQ's channel does."""

from __future__ import annotations


def allow(grant, kind: str, resource: str, name: str) -> None:
    """403 unless the user may `kind` (configure/write/read) the resource."""
    if not grant.unrestricted:
        grant.check(kind, resource, name)
