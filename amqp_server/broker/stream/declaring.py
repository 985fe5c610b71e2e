"""rabbit_stream_queue:declare/2's own check, after the arguments' and the
durability checks (vhost.py): a segment may not exceed 3 GB."""

from __future__ import annotations

from policies.stream_rules import MAX_SEGMENT_SIZE

from ...errors import precondition_failed
from ...wire.table import FieldTable, typed_value


def check_stream_declare(arguments: FieldTable) -> None:
    size = typed_value(arguments, "x-stream-max-segment-size-bytes")
    if size is not None and size[1] > MAX_SEGMENT_SIZE:
        raise precondition_failed("Exceeded max value for x-stream-max-segment-size-bytes")
