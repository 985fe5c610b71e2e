"""The queue's limits part: the rules that make messages (and the queue
itself) leave without being consumed.

- Length limits (`x-max-length`, `x-max-length-bytes`) with their overflow
  modes (dlx/limits.py decides): reject-publish refuses a message that
  would not fit, drop-head takes it and sheds the head while the queue is
  over.
- Message TTL (`x-message-ttl`, a message's `expiration`, Artemis's expiry
  delay clamps, dlx/expiry.py): the deadline a message gets as it arrives.
  Messages die at the head once it passes, and anywhere in the queue by
  the reaper's sweep; the queue walks its messages, this part says when.
- x-expires: a queue nobody used for that long is deleted.

Interface (the queue calls it; `now` is the queue's clock, wall-clock ms):

    apply(settings)               adopt new effective settings
    has_length_limit              a length limit applies: ask `admit` first
    admit(count, size, incoming)  dlx.limits ACCEPT, REJECT or REJECT_DLX for
                                  one more message of `incoming` bytes
    sheds_head                    drop-head with a limit: ask `over` after a change
    over(count, size)             a drop-head queue must shed its head
    deadline(message, now)        when a message arriving now expires (None: never)
    saw_message_ttl               a message may expire before those ahead of
                                  it (so the reaper looks behind the head)
    saw_deadline()                a message with a deadline was restored
    used(now, consumers)          the queue was used: effects (x-expires)
    unused(now, consumers)        its x-expires timer fired: effects

It owns the settings it reads, whether it saw a per-message TTL, and when
the queue was last used."""

from __future__ import annotations

from dlx import limits
from dlx.expiry import clamp_ttl, effective_ttl

from ..message import Message
from .effects import EXPIRES, ArmTimer, Unused

ACCEPT = limits.ACCEPT
REJECT_DLX = limits.REJECT_DLX
_NOTHING = ()


class Limits:
    __slots__ = (
        "_clamps",
        "_expires",
        "_message_ttl",
        "has_length_limit",
        "last_used",
        "saw_message_ttl",
        "settings",
        "sheds_head",
    )

    def __init__(self, now: float) -> None:
        self.settings = None
        self.has_length_limit = False
        self.sheds_head = False
        self.saw_message_ttl = False
        self.last_used = now

    def apply(self, settings) -> None:
        self.settings = settings
        self.has_length_limit = settings.has_length_limit
        self.sheds_head = settings.has_length_limit and settings.overflow == limits.DROP_HEAD
        self._message_ttl = settings.message_ttl
        self._clamps = settings.clamps_expiry
        self._expires = settings.expires
        if self._clamps:
            self.saw_message_ttl = True  # deadlines no longer grow with the queue

    def admit(self, count: int, size: int, incoming: int) -> str:
        """Whether a queue holding `count` messages (ready and held dead
        letters) of `size` ready bytes takes one more."""
        settings = self.settings
        return limits.publish_verdict(settings.overflow, count, size, incoming,
                                      settings.max_length, settings.max_length_bytes)

    def over(self, count: int, size: int) -> bool:
        settings = self.settings
        return limits.over_limit(count, size, settings.max_length, settings.max_length_bytes)

    def deadline(self, message: Message, now: float) -> float | None:
        ttl = effective_ttl(self._message_ttl, message.ttl)
        if self._clamps:
            settings = self.settings
            ttl = clamp_ttl(ttl, settings.expiry_delay, settings.min_expiry_delay,
                            settings.max_expiry_delay)
        if message.ttl is not None:
            self.saw_message_ttl = True
        return None if ttl is None else now + ttl

    def saw_deadline(self) -> None:
        self.saw_message_ttl = True

    def used(self, now: float, consumers: bool) -> tuple:
        """Declared, consumed from or got from (rabbit_amqqueue_process:
        ensure_expiry_timer): x-expires counts from `now`, and without
        consumers a check is due then (the timer is armed once: a later
        check finds the newer use and waits again)."""
        self.last_used = now
        if self._expires is None or consumers:
            return _NOTHING
        return (ArmTimer(EXPIRES, now + self._expires),)

    def unused(self, now: float, consumers: bool) -> tuple:
        """The x-expires check: the queue goes if nobody used it since."""
        if self._expires is None or consumers:
            return _NOTHING
        due = self.last_used + self._expires
        if now >= due:
            return (Unused(),)  # deleted; its messages are not dead-lettered
        return (ArmTimer(EXPIRES, due),)
