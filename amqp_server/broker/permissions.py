"""Per-user, per-vhost permissions: configure, write and read regular
expressions matched against resource names, as rabbit_access_control does.

The patterns are searched, not anchored (re:run), an empty pattern grants
nothing, and the default exchange is checked under the name `amq.default`.
Refusals carry RabbitMQ's words: "access to exchange 'x' in vhost '/'
refused for user 'bob'".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import access_refused, resource_name

CONFIGURE, WRITE, READ = "configure", "write", "read"
FULL = ".*"
NONE = ""


class PermissionError_(ValueError):
    """A permission pattern that is not a regular expression."""


@dataclass(frozen=True)
class Permission:
    configure: str = FULL
    write: str = FULL
    read: str = FULL
    _compiled: dict = field(default=None, compare=False, repr=False)
    unrestricted: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        compiled = {}
        for kind in (CONFIGURE, WRITE, READ):
            pattern = getattr(self, kind)
            try:
                compiled[kind] = re.compile(pattern) if pattern else None
            except re.error as exc:
                raise PermissionError_(f"{kind} pattern {pattern!r} is not a valid "
                                       f"regular expression: {exc}") from None
        object.__setattr__(self, "_compiled", compiled)
        # Read on every publish: the common case skips the regex.
        object.__setattr__(self, "unrestricted",
                           self.configure == self.write == self.read == FULL)

    def allows(self, kind: str, name: str) -> bool:
        regex = self._compiled[kind]
        return regex is not None and regex.search(name or "amq.default") is not None

    def as_json(self, user: str, vhost: str) -> dict:
        return {"user": user, "vhost": vhost, "configure": self.configure,
                "write": self.write, "read": self.read}


NO_ACCESS = Permission(NONE, NONE, NONE)


def check(permission: Permission, kind: str, resource: str, name: str, vhost: str,
          user: str) -> None:
    """Raise 403 ACCESS_REFUSED unless `permission` grants `kind` on the
    resource (a channel error)."""
    if not permission.allows(kind, name):
        shown = name or "amq.default"
        raise access_refused(
            f"access to {resource_name(resource, shown, vhost)} refused for user '{user}'")
