"""Broker objects as the RabbitMQ management API shapes them in JSON, so
rabbitmqadmin and other tools read them unchanged."""

from __future__ import annotations

from dlx.dead_letter import DROP_CAUSES
from dlx.deaths import REASONS
from dlx.delayed_retry import describe as describe_delayed_retry

from ..broker.definitions import jsonable

NODE = "amqp-server@localhost"


def dead_letter_counters(queue) -> dict:
    stats = queue.stats
    dropped: dict[str, int] = {cause: 0 for cause in DROP_CAUSES}
    for (cause, _reason), count in stats["dropped"].items():
        dropped[cause] = dropped.get(cause, 0) + count
    return {
        "dead_lettered": {reason: stats["dead_lettered"].get(reason, 0) for reason in REASONS},
        "dead_letter_dropped": dropped,
        "dead_letter_dropped_by_reason": {
            f"{cause}/{reason}": count for (cause, reason), count in stats["dropped"].items()},
        "expired": stats["expired"],
        "rejected_publishes": stats["rejected_publishes"],
        "dead_letter_held": queue.held_count,
        # ours: dead letters retention archived out of the queue
        "dead_letters_archived": queue.stats["archived"],
    }


def queue_json(queue) -> dict:
    policy = queue.policy
    operator = queue.operator_policy
    effective = {}
    if operator is not None:
        effective.update(operator.definition)
    if policy is not None:
        effective.update(policy.definition)
    return {
        "name": queue.name,
        "vhost": queue.vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": jsonable(queue.arguments),
        "type": queue.settings.queue_type,
        "node": NODE,
        "state": "running",
        "messages": queue.message_count + queue.unacked + queue.delayed_count,
        "messages_ready": queue.message_count,
        "messages_unacknowledged": queue.unacked,
        # Held back by a redelivery delay (Artemis's scheduled count).
        "messages_delayed": queue.delayed_count,
        "message_bytes_ready": queue.ready_bytes,
        # RabbitMQ's names for where ready messages are: memory or paged out.
        "messages_ram": len(queue.ready),
        "messages_paged_out": queue.paged_count,
        "message_bytes_paged_out": queue.paged_bytes,
        # A 4.3 quorum queue's consumers in a consumer timeout are listed
        # (consumer_details) but not counted, as rabbit_fifo counts them.
        "consumers": queue.consumers_up,
        "single_active_consumer_tag": _single_active_tag(queue),
        **(_classic_fields(queue) if queue.settings.queue_type == "classic" else {}),
        **(quorum_4_3_fields(queue) if queue.settings.is_quorum_4x else {}),
        "policy": policy.name if policy else None,
        "operator_policy": operator.name if operator else None,
        "effective_policy_definition": effective,
        "message_stats": {"publish": queue.published, "deliver_get": queue.delivered,
                          "ack": queue.acked},
        **dead_letter_counters(queue),
        **(stream_fields(queue) if queue.settings.is_stream else {}),
    }


def stream_fields(queue) -> dict:
    """A stream's own fields: RabbitMQ's (rabbit_stream_queue:i/2: the
    members, `segments`, `committed_offset`; `messages` is the log's count,
    none is taken out by a delivery) and ours under `stream` (first and
    last offsets, size on disk, each consumer's next offset)."""
    log = queue.log
    count = queue.message_count
    last = log.committed - 1 if log is not None and count else None
    committed = log.committed - 1 if log is not None and log.committed else None
    return {
        "messages": count,
        "messages_ready": count,
        "leader": NODE,
        "members": [NODE],
        "online": [NODE],
        "segments": log.segment_count if log is not None else 0,
        "committed_offset": committed,
        "stream": {
            "first_offset": log.first_offset if log is not None and count else None,
            "last_offset": last,
            "committed_offset": committed,
            "next_offset": log.next_offset if log is not None else 0,
            "segments": log.segment_count if log is not None else 0,
            "size_bytes": log.size if log is not None else 0,
            "removed_by_retention": queue.retained,
            "consumer_offsets": queue.consumer_offsets(),
        },
    }


def quorum_4_3_fields(queue) -> dict:
    """What RabbitMQ 4.3 shows of a quorum queue (rabbit_quorum_queue:
    handle_tick/3): its delivery limit (`unlimited` when off), its delayed
    retry, its ready messages by priority and those returned (served
    first), and when the first and last delayed messages are due (ms since
    the epoch, only while some wait)."""
    settings = queue.settings
    limit = settings.delivery_limit
    by_priority = queue.by_priority()
    shape = {"delivery_limit": limit if limit is not None else "unlimited",
             "delayed_retry": describe_delayed_retry(settings.delayed_retry),
             # rabbit_fifo_pq:overview/1: each priority holding messages
             "messages_by_priority": {str(level): count
                                      for level, count in sorted(by_priority.items())},
             "messages_active_priorities": len(by_priority),
             "messages_ready_returned": len(queue.ready.returns)}
    due = queue.redelivery.due_times()
    if due:
        shape["next_delayed_at"], shape["last_delayed_at"] = int(due[0]), int(due[1])
    return shape


def _classic_fields(queue) -> dict:
    """What RabbitMQ 3.10 shows of a classic queue only: its messages in
    memory, delivered ones included, and its exclusive consumer."""
    return {"messages_ram": len(queue.ready) + queue.unacked,
            "messages_ready_ram": len(queue.ready),
            "messages_unacknowledged_ram": queue.unacked,
            "exclusive_consumer_tag": (queue.exclusive_consumer.tag
                                       if queue.exclusive_consumer is not None else None)}


def _single_active_tag(queue) -> str | None:
    active = getattr(queue.consumers, "active", None)
    return active.tag if active is not None else None


def exchange_json(exchange) -> dict:
    shape = {
        "name": exchange.name,
        "vhost": exchange.vhost,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": jsonable(exchange.arguments),
        "policy": exchange.policy.name if exchange.policy else None,
        "user_who_performed_action": "",
    }
    held = getattr(exchange, "held", None)
    if held is not None:
        # The delayed-message plugin's info item, which the management
        # API lists with the exchange (rabbit_exchange_type_delayed_message:info/1).
        shape["messages_delayed"] = held.held_by(exchange.name)
    return shape


def connection_json(conn) -> dict:
    user = conn.user.name if conn.user is not None else None
    props = conn.client_properties or {}
    return {
        "name": conn.name,
        "node": NODE,
        "user": user,
        "vhost": conn.vhost.name if conn.vhost is not None else None,
        "peer_host": conn.peer_host,
        "peer_port": conn.peer_port,
        "host": conn.local_host,
        "port": conn.local_port,
        "ssl": conn.tls,
        "auth_mechanism": conn.mechanism,
        "connected_at": conn.connected_at,
        "channels": len(conn.channels),
        "frame_max": conn.frame_max,
        "channel_max": conn.channel_max,
        "timeout": conn.heartbeat,
        "protocol": "AMQP 0-9-1",
        "state": conn.flow.state(),
        "client_properties": jsonable(props),
    }


def channel_json(conn, channel) -> dict:
    return {
        "name": f"{conn.name} ({channel.number})",
        "number": channel.number,
        "node": NODE,
        "user": conn.user.name if conn.user is not None else None,
        "vhost": conn.vhost.name if conn.vhost is not None else None,
        "connection_details": {"name": conn.name, "peer_host": conn.peer_host},
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": len(channel.unacked),
        "prefetch_count": channel.consumer_prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": channel.confirm,
        "transactional": channel.tx is not None,
        "state": conn.flow.channel_state(channel.number),
    }


def consumer_json(conn, channel, consumer) -> dict:
    return {
        "consumer_tag": consumer.tag,
        "queue": {"name": consumer.queue.name, "vhost": consumer.queue.vhost},
        "channel_details": _channel_details(conn, channel),
        "ack_required": not consumer.no_ack,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "arguments": jsonable(consumer.arguments or {}),
        "active": _is_active(consumer),
        # RabbitMQ's words: single_active / waiting on a single-active-consumer queue.
        "activity_status": _activity(consumer),
        "consumer_priority": consumer.priority,
    }


def _channel_details(conn, channel) -> dict:
    """The channel a consumer is on, as RabbitMQ names it in consumer
    listings (frameworks find a consumer's connection by its name)."""
    return {"name": f"{conn.name} ({channel.number})", "number": channel.number,
            "connection_name": conn.name, "node": NODE,
            "user": conn.user.name if conn.user is not None else None,
            "peer_host": conn.peer_host, "peer_port": conn.peer_port}


def consumer_details(queue) -> list[dict]:
    """A queue's consumers as a single queue's JSON lists them (RabbitMQ puts
    them on /api/queues/{vhost}/{name} only, not on the listings), by
    connection, channel and tag (the dispatch order turns)."""
    consumers = sorted(queue.consumers, key=lambda c: (c.channel.conn.connected_at,
                                                       c.channel.conn.name,
                                                       c.channel.number, c.tag))
    return [consumer_json(c.channel.conn, c.channel, c) for c in consumers]


def _is_active(consumer) -> bool:
    return consumer.queue.consumers.is_active(consumer)


def _activity(consumer) -> str:
    consumers = consumer.queue.consumers
    if not hasattr(consumers, "active"):
        return "up"
    return "single_active" if consumers.is_active(consumer) else "waiting"
