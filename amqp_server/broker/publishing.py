"""The one way a message enters queues: checked, routed, enqueued, counted.

Every publish goes through here: a channel's basic.publish (one at a time,
a run read back to back, or a transaction's, queued at commit), the
management API's publish, a workbench move or redrive; a dead letter uses
the enqueue step (its plan caches the route, dead_letterer.py).  The
functions are the virtual host's methods (`vhost.publish(...)`, bound in
vhost.py without a call in between: this is the broker's hottest path).

The steps, in rabbit_channel's order:

1. check: write permission on the exchange (the publisher's grant, 403),
   the exchange (404), not an internal one (403); then what the properties
   must pass, read only when their flags say they are there: a reply_to
   naming direct reply-to needs the publisher's reply consumer, `user_id`
   must name the publisher's user, expiration and CC/BCC must parse (406);
2. route: the exchange's queues, through exchange-to-exchange bindings and
   alternates; from the default exchange, a routing key naming a direct
   reply-to consumer reaches it on the way (rabbit_exchange:route);
3. enqueue into every routed queue, noting the queues that refuse it
   (overflow reject-publish); a queue that withholds credit (it grows
   faster than its consumers drain it: queue/credit.py) is told to the
   publisher's `sender` (a channel's: protocol/flow.py), whose connection
   then waits for it;
4. count it (broker/counters.py: what RabbitMQ's global counters count).

The result is an `Outcome`, from which the publisher answers: a channel's
basic.return and confirm or nack, the management API's `routed` or 400, a
workbench task's moved or kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AMQPError, not_found, precondition_failed, resource_name
from ..wire.properties import user_id
from .delayed_exchange import DELAYED_TYPE
from .direct_reply import asks_for_replies, name_replies
from .message import (
    CHECK_FLAGS,
    HEADER_PREFIX,
    INSPECT_FLAGS,
    REPLY_TO_FLAG,
    USER_ID_FLAG,
    InvalidMessage,
    Message,
)
from .permissions import WRITE
from .queue import REFUSED


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one publish."""

    routed: bool   # some queue was routed to (else: basic.return if mandatory)
    taken: bool    # some queue holds it
    refused: tuple = ()  # the routed queues that refused it (a nack)


UNROUTED = Outcome(False, False)
ENQUEUED = Outcome(True, True)  # routed, and every queue routed to took it


@dataclass(frozen=True, slots=True)
class Routed:
    """A publish checked and routed, to be queued later: a transaction's,
    queued at commit to the queues it was routed to when it arrived (as
    RabbitMQ: an exchange deleted in between cannot fail the commit)."""

    message: Message
    queue_names: tuple[str, ...]


# ---- the steps ---------------------------------------------------------

def exchange_for(vhost, name: str, grant):
    """The exchange a publish goes to, if the grant may write to it."""
    if not grant.unrestricted:  # read first: this runs for every publish
        grant.check(WRITE, "exchange", name)
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise not_found(f"no {resource_name('exchange', name, vhost.name)}")
    if exchange.internal:
        exchange.check_publishable()
    return exchange


def check_content(message: Message, grant, reply_name: str | None, layout=None) -> None:
    """The properties' checks, in RabbitMQ's order (406 when one fails).
    `reply_name`: the publisher's direct reply-to name, which a reply_to
    naming the pseudo-queue becomes (None: it consumes no replies).
    `layout`: where scan_properties found the headers and expiration."""
    header = message.header
    names_replies = header[HEADER_PREFIX] & REPLY_TO_FLAG and asks_for_replies(header)
    if names_replies and reply_name is None:
        raise precondition_failed("fast reply consumer does not exist")
    if header[HEADER_PREFIX + 1] & USER_ID_FLAG:
        _check_user_id(grant, header)
    if header[HEADER_PREFIX] & INSPECT_FLAGS:
        try:
            message.inspect(layout)
        except InvalidMessage as exc:
            raise precondition_failed(str(exc)) from None
    if names_replies:
        name_replies(message, reply_name)


class _UserIdPassed:
    """The last (header, grant) whose user_id passed: publishes that repeat
    their properties share one header object (connection._fused_publish),
    so user_id is read once for them, not once a message.  A grant's user
    never changes; the pair is replaced whole (brokers in other threads
    may publish too)."""

    last: tuple = (None, None)


def _check_user_id(grant, header: bytes) -> None:
    header_passed, grant_passed = _UserIdPassed.last
    if header is not header_passed or grant is not grant_passed:
        grant.check_user_id(user_id(header, HEADER_PREFIX))
        _UserIdPassed.last = (header, grant)


def route(vhost, exchange, message: Message):
    """The queues `message` goes to; direct reply-to consumers its keys
    name get it on the way (looked for only when its one key routed to no
    queue, or it has several: no queue may be called amq.*)."""
    keys = message.routing_keys
    queues = vhost.route(exchange, keys, message)
    if (not queues or len(keys) > 1) and not exchange.name:
        vhost.replies.deliver(message)
    return queues


def enqueue(queues, message: Message, sender=None) -> Outcome:
    """Into every routed queue; a refusal stops none of the others.
    `sender`: who waits for a queue that withholds credit."""
    if not queues:
        return UNROUTED
    refused = None
    for queue in queues:
        if queue.enqueue(message) is REFUSED:
            if refused is None:
                refused = []
            refused.append(queue)
        if sender is not None and queue.withholds_credit:
            sender.wait_for(queue)
    if refused is None:
        return ENQUEUED
    return Outcome(True, len(refused) < len(queues), tuple(refused))


# ---- the virtual host's methods -----------------------------------------

def publish(vhost, message: Message, grant, mandatory: bool = False, confirm: bool = False,
            reply_name: str | None = None, layout=None, sender=None) -> Outcome:
    """A publish from a client (a channel, the management API), checked,
    routed, enqueued and counted.  `mandatory` and `confirm` say how it is
    counted; answering it is the publisher's part.  `sender`: a channel's
    (protocol/flow.py ChannelCredit), which waits for queues that withhold
    credit."""
    exchange = exchange_for(vhost, message.exchange, grant)
    header = message.header
    if header[HEADER_PREFIX] & CHECK_FLAGS or header[HEADER_PREFIX + 1] & USER_ID_FLAG:
        check_content(message, grant, reply_name, layout)
    if exchange.type_name == DELAYED_TYPE:
        # The layout found on arrival holds while the header is the one
        # that arrived (a BCC or reply-to check may have replaced it).
        exchange.check_delay(message, layout if message.header is header else None)
    outcome = enqueue(route(vhost, exchange, message), message, sender)
    vhost.counters.publishes(1, outcome.routed, mandatory, confirm, outcome.refused)
    return outcome


def publish_run(vhost, messages: list, grant, mandatory: bool = False, confirm: bool = False,
                reply_name: str | None = None, layouts: list | None = None,
                answer=None, answer_run=None, sender=None) -> None:
    """Messages published back to back to the same exchange with the same
    routing key (their properties may differ), with the same outcome as
    `publish` for each: routed once where nothing in them can route them
    apart, queued together where every queue they go to is plain.
    `answer(message, outcome, mandatory)`, when given, hears each outcome
    in order, as soon as it is known; `answer_run(messages, outcome,
    mandatory)`, when given too, hears a run queued together at once.
    Should a message fail its checks, those before it are published
    first, then its error is raised.  `layouts` (scan_properties's, one a
    message) go on to the queues while every header is the one scanned."""
    exchange = exchange_for(vhost, messages[0].exchange, grant)
    delays = exchange.type_name == DELAYED_TYPE
    refusal = None
    checked = 0
    last_header = None
    inspected = False  # the last distinct header had something to check
    for message in messages:
        header = message.header
        if header is not last_header:
            inspected = bool(header[HEADER_PREFIX] & CHECK_FLAGS
                             or header[HEADER_PREFIX + 1] & USER_ID_FLAG)
            if inspected:
                try:
                    check_content(message, grant, reply_name,
                                  layouts[checked] if layouts else None)
                except AMQPError as error:
                    refusal = error
                    break
                if message.header is not header:
                    layouts = None  # a BCC or reply-to check gave it another header
        elif inspected:  # the same properties: the same findings
            message.found_as(messages[checked - 1])
        if delays:
            try:
                exchange.check_delay(message, layouts[checked]
                                     if layouts and message.header is header else None)
            except AMQPError as error:
                refusal = error
                break
        last_header = header
        checked += 1
    if checked:
        _route_run(vhost, exchange, messages[:checked] if refusal else messages, mandatory,
                   confirm, answer, answer_run, layouts, sender)
    if refusal is not None:
        raise refusal


def _route_run(vhost, exchange, messages: list, mandatory: bool, confirm: bool,
               answer, answer_run, layouts: list | None, sender) -> None:
    counters = vhost.counters
    first = messages[0]
    keys = first.routing_keys
    if exchange.routes_by_content or any(
            m.routing_keys != keys or m.ttl is not None or m.scheduled is not None
            for m in messages):
        queues = None  # each routed on its own
    else:
        queues = vhost.route(exchange, keys, first)
        if (not queues or len(keys) > 1) and not exchange.name:
            for message in messages:
                vhost.replies.deliver(message)
        if all(queue.plain for queue in queues):
            # The fast path: plain queues never refuse, nothing differs.
            outcome = ENQUEUED if queues else UNROUTED
            counters.publishes(len(messages), bool(queues), mandatory, confirm)
            for queue in queues:
                queue.enqueue_run(messages, layouts)
                if sender is not None and queue.withholds_credit:
                    sender.wait_for(queue)
            if answer_run is not None:
                answer_run(messages, outcome, mandatory)
            elif answer is not None:
                for message in messages:
                    answer(message, outcome, mandatory)
            return
    for message in messages:  # one by one (limits, DLX), routed alike or each itself
        outcome = enqueue(route(vhost, exchange, message) if queues is None else queues,
                          message, sender)
        counters.publishes(1, outcome.routed, mandatory, confirm, outcome.refused)
        if answer is not None:
            answer(message, outcome, mandatory)


def check_and_route(vhost, message: Message, grant, reply_name: str | None = None) -> Routed:
    """A transaction's publish as it arrives: checked and routed now (so
    direct reply-to consumers get it now, as RabbitMQ's do), queued by
    `enqueue_routed` at commit."""
    exchange = exchange_for(vhost, message.exchange, grant)
    check_content(message, grant, reply_name)
    if exchange.type_name == DELAYED_TYPE:
        exchange.check_delay(message)
    return Routed(message, tuple(queue.name for queue in route(vhost, exchange, message)))


def enqueue_routed(vhost, routed: Routed, mandatory: bool = False,
                   confirm: bool = False) -> Outcome:
    """A transaction's publish at commit, into the queues it was routed to
    that are still there."""
    queues = vhost.queues
    outcome = enqueue([queues[name] for name in routed.queue_names if name in queues],
                      routed.message)
    vhost.counters.publishes(1, outcome.routed, mandatory, confirm, outcome.refused)
    return outcome


def republish(vhost, message: Message, grant, routing_keys: tuple[str, ...]) -> Outcome:
    """A message the broker holds, published again by the workbench (a
    move or a redrive) with the rights of who asked: write on the exchange,
    not an internal one, as a publish.  Its properties were checked when it
    first came in (its user_id named its publisher then, not who moves it);
    it is read again for its TTL, and routed by `routing_keys` (a redrive's
    are the keys it died with).  Counted as a mandatory publish in confirm
    mode: a move waits until the copy is stored and keeps what no queue
    takes."""
    exchange = exchange_for(vhost, message.exchange, grant)
    try:
        message.inspect()
    except InvalidMessage as exc:
        raise precondition_failed(str(exc)) from None
    message.routing_keys = tuple(routing_keys)
    outcome = enqueue(route(vhost, exchange, message), message)
    vhost.counters.publishes(1, outcome.routed, True, True, outcome.refused)
    return outcome
