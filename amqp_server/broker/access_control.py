"""Who may do what: the one permission service that every entry point asks.

AMQP channels hold a `Grant` for their user and vhost and ask it before each
declare, delete, bind, publish, get, consume and purge.  The management HTTP
API (and through it amqpctl and the web console) asks `AccessControl` what a
user's tags let it see and do, then acts through the same `Grant` a channel
would hold, so a route that declares a queue makes exactly the checks that
queue.declare makes.

The two layers are RabbitMQ's: rabbit_access_control (vhost login and the
configure/write/read regexes, refused with 403 ACCESS_REFUSED) and
rabbit_mgmt_util (what the tags allow over HTTP, refused with 401
`not_authorised`):

- management: sees and acts only in vhosts it may log in to, and only its
  own connections and channels;
- policymaker: management, plus policies in those vhosts;
- monitoring: management, plus reading every vhost's objects and everyone's
  connections, channels and consumers; its extra sight changes nothing;
- administrator: everything; acting inside a vhost still needs permissions
  there, as a RabbitMQ administrator's HTTP requests do.
"""

from __future__ import annotations

from ..errors import access_refused, precondition_failed
from .permissions import CONFIGURE, READ, WRITE, Permission, check
from .users import User

ADMINISTRATOR = "administrator"
MONITORING = "monitoring"
POLICYMAKER = "policymaker"
MANAGEMENT = "management"
IMPERSONATOR = "impersonator"
MANAGEMENT_TAGS = frozenset({ADMINISTRATOR, MONITORING, POLICYMAKER, MANAGEMENT})

# Queue arguments that name an exchange the queue will publish its dead
# letters to: declaring such a queue needs write on that exchange.
DEAD_LETTER_TARGETS = ("x-dead-letter-exchange", "x-dead-letter-address", "x-expiry-address")


def check_not_default(*exchanges: str) -> None:
    """Bindings to or from the default exchange are refused (rabbit_channel)."""
    if "" in exchanges:
        raise access_refused("operation not permitted on the default exchange")


class NotAuthorised(Exception):
    """Refused by the user's tags or vhost access: the management API's 401
    {"error": "not_authorised", "reason": str(self)}."""


class Grant:
    """One user's rights in one vhost, as an AMQP connection or an HTTP
    request holds them.  Checks raise AMQPError 403 with RabbitMQ's words."""

    __slots__ = ("user", "vhost", "permission", "unrestricted", "impersonator")

    def __init__(self, user: User, vhost: str, permission: Permission) -> None:
        self.user = user
        self.vhost = vhost
        self.permission = permission
        # Read on every publish: the common case skips the regexes.
        self.unrestricted = permission.unrestricted
        self.impersonator = IMPERSONATOR in user.tags

    def check(self, kind: str, resource: str, name: str) -> None:
        if not self.unrestricted:
            check(self.permission, kind, resource, name, self.vhost, self.user.name)

    def check_queue_declare(self, name: str, arguments, exists: bool) -> None:
        """configure on the queue (a server-named one as `amq.gen-`); when
        it is created with a dead-letter or expiry exchange, read on the
        queue and write on that exchange (seed 002; rabbit_channel checks
        in this order, and only for a new queue)."""
        if self.unrestricted:
            return
        checked = name or "amq.gen-"
        self.check(CONFIGURE, "queue", checked)
        if exists:
            return
        for key in DEAD_LETTER_TARGETS:
            target = (arguments or {}).get(key)
            if isinstance(target, (str, bytes)):
                self.check(READ, "queue", checked)
                self.check(WRITE, "exchange",
                           target.decode() if isinstance(target, bytes) else target)

    def check_exchange_declare(self, name: str, arguments, exists: bool) -> None:
        """configure on the exchange; when it is created with an alternate
        exchange, read on it and write on the alternate, which is where its
        unroutable messages will be published (rabbit_channel)."""
        if self.unrestricted:
            return
        self.check(CONFIGURE, "exchange", name)
        alternate = (arguments or {}).get("alternate-exchange")
        if not exists and isinstance(alternate, (str, bytes)):
            self.check(READ, "exchange", name)
            self.check(WRITE, "exchange",
                       alternate.decode() if isinstance(alternate, bytes) else alternate)

    def check_binding(self, destination_kind: str, destination: str, source: str) -> None:
        """rabbit_channel binding_action: write on the destination, read on
        the source exchange."""
        self.check(WRITE, destination_kind, destination)
        self.check(READ, "exchange", source)

    def check_user_id(self, claimed: str | None) -> None:
        """A publish may only carry the logged-in user's name as `user_id`,
        unless the user is an impersonator (rabbit_channel)."""
        if claimed is None or claimed == self.user.name or self.impersonator:
            return
        raise precondition_failed(f"user_id property set to '{claimed}' but authenticated "
                                  f"user was '{self.user.name}'")


class AccessControl:
    """Answers for the broker's users and permissions (it reads the broker's
    own tables, so changes apply at once)."""

    def __init__(self, users: dict, permissions: dict, vhosts: dict,
                 loopback_users: list[str] = ()) -> None:
        self.users = users
        self.permissions = permissions
        self.vhosts = vhosts
        self.loopback_users = frozenset(loopback_users)

    def may_connect_from(self, user: User, is_loopback: bool) -> bool:
        """RabbitMQ's loopback_users (guest by default) log in from this
        machine only, whatever the user's record says."""
        return is_loopback or user.name not in self.loopback_users

    # ---- AMQP: vhost login ----------------------------------------------

    def login(self, user: User, vhost: str) -> Grant | None:
        """The user's grant in `vhost`, or None when it may not log in there."""
        permission = self.permissions.get((user.name, vhost))
        return Grant(user, vhost, permission) if permission is not None else None

    # ---- HTTP: what tags allow ------------------------------------------

    @staticmethod
    def uses_management(user: User) -> bool:
        return not MANAGEMENT_TAGS.isdisjoint(user.tags)

    @staticmethod
    def is_admin(user: User) -> bool:
        return ADMINISTRATOR in user.tags

    @staticmethod
    def is_monitor(user: User) -> bool:
        """Sees everything: administrator and monitoring."""
        return ADMINISTRATOR in user.tags or MONITORING in user.tags

    def may_log_in(self, user: User, vhost: str) -> bool:
        return (user.name, vhost) in self.permissions

    def sees_vhost(self, user: User, vhost: str) -> bool:
        return self.is_monitor(user) or self.may_log_in(user, vhost)

    def visible_vhosts(self, user: User) -> list[str]:
        return [name for name in self.vhosts if self.sees_vhost(user, name)]

    def require_admin(self, user: User) -> None:
        if not self.is_admin(user):
            raise NotAuthorised("Not administrator user")

    def require_monitor(self, user: User) -> None:
        """Node-wide figures (/api/nodes): monitoring or administrator."""
        if not self.is_monitor(user):
            raise NotAuthorised("Not monitor user")

    def require_visible(self, user: User, vhost: str) -> None:
        """Reading a vhost's objects.  An unknown vhost passes, so that the
        route answers 404 as RabbitMQ's does."""
        if vhost in self.vhosts and not self.sees_vhost(user, vhost):
            raise NotAuthorised("User not authorised to access virtual host")

    def require_vhost(self, user: User, vhost: str) -> None:
        """Changing a vhost's objects: administrators, or users who may log
        in there.  An unknown vhost passes (the route answers 404)."""
        if (vhost in self.vhosts and not self.is_admin(user)
                and not self.may_log_in(user, vhost)):
            raise NotAuthorised("User not authorised to access virtual host")

    def grant(self, user: User, vhost: str) -> Grant:
        """The grant an HTTP request acts with: the one the user would have
        on an AMQP channel there.  RabbitMQ's management plugin opens such a
        channel as the user, so an administrator without permissions in the
        vhost is refused too."""
        grant = self.login(user, vhost)
        if grant is None:
            raise NotAuthorised("Access refused.")
        return grant

    def require_policymaker(self, user: User, vhost: str) -> None:
        if self.is_admin(user):
            return
        if POLICYMAKER not in user.tags or not self.may_log_in(user, vhost):
            raise NotAuthorised("User not authorised to access object")

    def sees_owned(self, user: User, owner: str | None) -> bool:
        """Connections, channels and consumers: monitors see everyone's."""
        return self.is_monitor(user) or owner == user.name

    def require_sees_owned(self, user: User, owner: str | None) -> None:
        if not self.sees_owned(user, owner):
            raise NotAuthorised("User not authorised to access object")

    def require_may_close(self, user: User, owner: str | None) -> None:
        """Closing a connection: administrators, or its own user."""
        if not (self.is_admin(user) or owner == user.name):
            raise NotAuthorised("User not authorised to access object")

