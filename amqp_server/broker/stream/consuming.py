"""What basic.consume on a stream must carry, checked in
rabbit_stream_queue:consume/3's order and with its wording: a prefetch
(credit is how a stream paces a consumer), manual acknowledgements, no
channel-wide qos."""

from __future__ import annotations

from ...errors import not_implemented, precondition_failed, resource_name


def check_stream_consume(queue, method, consumer_prefetch: int, global_prefetch: int) -> None:
    what = resource_name("queue", queue.name, queue.vhost)
    if not consumer_prefetch:
        raise precondition_failed(f"consumer prefetch count is not set for '{what}'")
    if method.no_ack:
        raise not_implemented(f"automatic acknowledgement not supported by stream queues {what}")
    if global_prefetch:
        raise not_implemented(f"{what} does not support global qos")
